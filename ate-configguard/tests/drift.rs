//! Config-default drift: defaults vs base vs overlays.

use std::collections::BTreeSet;

use ate_configguard::{Source, drift};

const DEFAULTS: &str = r#"{"LOG_LEVEL": "info", "TIMEOUT": "30", "API_KEY": "unset"}"#;
const BASE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: app }\ndata: { LOG_LEVEL: info, TIMEOUT: '30', API_KEY: real-key }\n";

fn run(
    base: &str,
    overlays: &[&str],
    secret: &[&str],
) -> Result<ate_configguard::Report, ate_configguard::InputError> {
    run_with_defaults(DEFAULTS, base, overlays, secret)
}

fn run_with_defaults(
    defaults: &str,
    base: &str,
    overlays: &[&str],
    secret: &[&str],
) -> Result<ate_configguard::Report, ate_configguard::InputError> {
    let overlays: Vec<Source<'_>> = overlays
        .iter()
        .map(|t| Source {
            text: t,
            name: "overlay.yaml",
        })
        .collect();
    let secret: BTreeSet<String> = secret.iter().map(|s| s.to_string()).collect();
    drift(
        Source {
            text: defaults,
            name: "defaults.json",
        },
        Source {
            text: base,
            name: "base.yaml",
        },
        &overlays,
        &secret,
    )
}

fn codes(r: &ate_configguard::Report) -> Vec<(String, String, String)> {
    r.failures
        .iter()
        .map(|f| {
            (
                f.code.to_string(),
                f.key.clone().unwrap_or_default(),
                f.site.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn agreeing_defaults_base_and_overlay_pass_and_secret_keys_are_not_compared() {
    let overlay = "kind: ConfigMap\nmetadata: { name: app }\ndata: { TIMEOUT: '30' }\n";
    let r = run(BASE, &[overlay], &["API_KEY"]).unwrap();
    assert!(r.is_safe(), "{}", r.to_text());
    // Three defaults, in the base and in the base with the overlay.
    assert_eq!(r.references_checked, 6);
    assert!(
        r.to_drift_text().ends_with("6 key(s) compared\n"),
        "{}",
        r.to_drift_text()
    );
    let r = run(BASE, &[overlay, overlay], &["API_KEY"]).unwrap();
    assert_eq!(r.references_checked, 9);
}

#[test]
fn a_differing_value_fails_without_printing_it() {
    let r = run(BASE, &[], &[]).unwrap();
    assert_eq!(
        codes(&r),
        vec![(
            "value-differs".into(),
            "API_KEY".into(),
            "base base.yaml".into()
        )]
    );
    assert!(!r.to_text().contains("real-key") && !r.to_text().contains("unset"));
}

#[test]
fn overlays_inherit_omitted_keys_and_null_deletes() {
    let omit = "kind: ConfigMap\nmetadata: { name: app }\ndata: { LOG_LEVEL: info }\n";
    assert!(run(BASE, &[omit], &["API_KEY"]).unwrap().is_safe());
    let delete = "kind: ConfigMap\nmetadata: { name: app }\ndata: { TIMEOUT: null }\n";
    let r = run(BASE, &[delete], &["API_KEY"]).unwrap();
    assert_eq!(
        codes(&r),
        vec![(
            "missing-default".into(),
            "TIMEOUT".into(),
            "overlay overlay.yaml".into()
        )]
    );
    let changed = "kind: ConfigMap\nmetadata: { name: app }\ndata: { LOG_LEVEL: debug }\n";
    assert_eq!(
        run(BASE, &[changed], &["API_KEY"]).unwrap().failures[0].code,
        "value-differs"
    );
    // `data: null` deletes the whole field: nothing is inherited.
    let no_data = "kind: ConfigMap\nmetadata: { name: app }\ndata: null\n";
    let r = run(BASE, &[no_data], &["API_KEY"]).unwrap();
    let missing: Vec<_> = codes(&r)
        .into_iter()
        .map(|(code, key, _)| (code, key))
        .collect();
    assert_eq!(
        missing,
        ["API_KEY", "LOG_LEVEL", "TIMEOUT"].map(|k| ("missing-default".to_owned(), k.to_owned()))
    );
}

#[test]
fn patch_directives_replace_and_delete() {
    let replace =
        "kind: ConfigMap\nmetadata: { name: app }\ndata:\n  $patch: replace\n  LOG_LEVEL: info\n";
    let r = run(BASE, &[replace], &["API_KEY"]).unwrap();
    let missing: Vec<_> = codes(&r).into_iter().map(|c| c.1).collect();
    assert_eq!(missing, ["API_KEY", "TIMEOUT"]);
    // At the top of the overlay, `$patch: replace` replaces the whole
    // object: only its own data is left.
    let replace_object =
        "$patch: replace\nkind: ConfigMap\nmetadata: { name: app }\ndata: { LOG_LEVEL: info }\n";
    let r = run(BASE, &[replace_object], &["API_KEY"]).unwrap();
    let missing: Vec<_> = codes(&r).into_iter().map(|c| c.1).collect();
    assert_eq!(missing, ["API_KEY", "TIMEOUT"]);
    // `$patch: merge` is the default, said out loud: omitted keys inherit.
    let merge =
        "$patch: merge\nkind: ConfigMap\nmetadata: { name: app }\ndata: { TIMEOUT: '30' }\n";
    let r = run(BASE, &[merge], &["API_KEY"]).unwrap();
    assert!(r.is_safe(), "{}", r.to_text());
    let bogus = "$patch: squash\nkind: ConfigMap\nmetadata: { name: app }\n";
    let err = run(BASE, &[bogus], &[]).unwrap_err().to_string();
    assert!(err.contains("unsupported directive $patch"), "{err}");
    let delete = "$patch: delete\nkind: ConfigMap\nmetadata: { name: app }\n";
    assert_eq!(
        run(BASE, &[delete], &["API_KEY"]).unwrap().failures[0].code,
        "object-deleted"
    );
    let unknown = "kind: ConfigMap\nmetadata: { name: app }\n$retainKeys: [a]\n";
    let err = run(BASE, &[unknown], &[]).unwrap_err().to_string();
    assert!(err.contains("$retainKeys"), "{err}");
    let unknown_in_data =
        "kind: ConfigMap\nmetadata: { name: app }\ndata: { $setElementOrder: x }\n";
    let err = run(BASE, &[unknown_in_data], &[]).unwrap_err().to_string();
    assert!(err.contains("$setElementOrder"), "{err}");
    // Only `$patch` takes `replace` or `merge`.
    let other_directive =
        "kind: ConfigMap\nmetadata: { name: app }\ndata: { $retainKeys: merge }\n";
    let err = run(BASE, &[other_directive], &[]).unwrap_err().to_string();
    assert!(
        err.contains("unsupported directive $retainKeys in data"),
        "{err}"
    );
}

#[test]
fn keys_the_defaults_do_not_know_are_reported() {
    let base = "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: app }\ndata: { LOG_LEVEL: info, TIMEOUT: '30', API_KEY: x, STALE: 'yes' }\n";
    let r = run(base, &[], &["API_KEY"]).unwrap();
    assert_eq!(
        codes(&r),
        vec![(
            "unknown-key".into(),
            "STALE".into(),
            "base base.yaml".into()
        )]
    );
}

#[test]
fn secrets_and_bad_input_are_refused() {
    let secret =
        "apiVersion: v1\nkind: Secret\nmetadata: { name: app }\nstringData: { LOG_LEVEL: info }\n";
    let err = run(secret, &[], &[]).unwrap_err().to_string();
    assert!(err.contains("base.yaml") && err.contains("Secret"), "{err}");
    let err = run("not: [valid", &[], &[]).unwrap_err().to_string();
    assert!(err.contains("base.yaml"), "{err}");
    let non_string =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: app }\ndata: { LOG_LEVEL: [a] }\n";
    let err = run(non_string, &[], &[]).unwrap_err().to_string();
    assert!(err.contains("LOG_LEVEL is not a string"), "{err}");
    // What the check cannot judge is refused, naming the source and why:
    // binaryData keys would escape it, and of two documents it would have
    // to pick one.
    let binary = format!("{BASE}binaryData: {{ LOGO: aGk= }}\n");
    let overlay = "kind: ConfigMap\nbinaryData: { LOGO: aGk= }\n";
    let two = format!("{BASE}---\n{BASE}");
    let no_kind = BASE.replace("kind: ConfigMap\n", "");
    let secret_overlay = "kind: Secret\nmetadata: { name: app }\ndata: { TIMEOUT: MzA= }\n";
    for (what, base, overlays, want) in [
        (
            "binaryData in the base",
            binary.as_str(),
            vec![],
            "base.yaml: binaryData is not supported",
        ),
        (
            "binaryData in an overlay",
            BASE,
            vec![overlay],
            "overlay.yaml: binaryData is not supported",
        ),
        (
            "two documents in the base",
            two.as_str(),
            vec![],
            "base.yaml: expected one document, found 2",
        ),
        (
            "a base without a kind",
            no_kind.as_str(),
            vec![],
            "base.yaml: missing kind",
        ),
        (
            "an overlay of another kind",
            BASE,
            vec![secret_overlay],
            "overlay.yaml: expected a ConfigMap, found Secret",
        ),
    ] {
        let err = run(base, &overlays, &["API_KEY"]).unwrap_err().to_string();
        assert!(err.contains(want), "{what}: {err}");
    }
    // Defaults that cannot be read as one map of strings: in two documents
    // (which one holds them cannot be told), or with a null value.
    for (defaults, want) in [
        (
            "{\"LOG_LEVEL\": \"info\"}\n{\"LOG_LEVEL\": \"debug\"}\n",
            "defaults.json: expected one document, found 2",
        ),
        (
            r#"{"LOG_LEVEL": null}"#,
            "defaults.json: defaults: LOG_LEVEL is null",
        ),
    ] {
        let err = run_with_defaults(defaults, BASE, &[], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{defaults}: {err}");
    }
}

#[test]
fn an_overlay_that_names_another_configmap_is_refused() {
    // kustomize matches a patch to its target by name and namespace: a patch
    // of another ConfigMap says nothing about this one.
    let in_prod = BASE.replace("{ name: app }", "{ name: app, namespace: prod }");
    for (base, meta) in [
        (BASE, "{ name: other }"),
        (in_prod.as_str(), "{ name: app, namespace: staging }"),
    ] {
        let other = format!("kind: ConfigMap\nmetadata: {meta}\ndata: {{ LOG_LEVEL: debug }}\n");
        let err = run(base, &[&other], &["API_KEY"]).unwrap_err().to_string();
        assert!(
            err.contains("overlay.yaml") && err.contains("not the base's"),
            "{meta}: {err}"
        );
        assert!(!err.contains("kustomize"), "{meta}: {err}");
    }
    // kustomize's rendered outputs: a generator's hash suffix differs with
    // the contents. Refused too (nothing says they are one object), saying
    // what to give instead.
    let hashed = BASE.replace("{ name: app }", "{ name: app-5f7h2kbm9t }");
    let rendered =
        "kind: ConfigMap\nmetadata: { name: app-9g8m4tc2d6 }\ndata: { LOG_LEVEL: debug }\n";
    let err = run(&hashed, &[rendered], &["API_KEY"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("differ only in a kustomize hash suffix")
            && err.contains("give the rendered overlay alone as --base"),
        "{err}"
    );
    // A suffix outside kustomize's alphabet (no vowels, no 0, 1 or 3) is
    // part of the name, not a hash: no such hint.
    let named = BASE.replace("{ name: app }", "{ name: app-aaaaaaaaaa }");
    let other = "kind: ConfigMap\nmetadata: { name: app-eeeeeeeeee }\ndata: { LOG_LEVEL: debug }\n";
    let err = run(&named, &[other], &["API_KEY"]).unwrap_err().to_string();
    assert!(
        err.contains("not the base's") && !err.contains("kustomize"),
        "{err}"
    );
    // Naming the base, or nothing, patches the base; so does a namespace
    // where the base states none (it is the overlay's to set, and the
    // rendered object's: findings name it there).
    for (meta, namespace) in [
        ("metadata: { name: app }\n", "default"),
        ("metadata: { name: app, namespace: prod }\n", "prod"),
        ("", "default"),
    ] {
        let patch = format!("kind: ConfigMap\n{meta}data: {{ LOG_LEVEL: debug }}\n");
        let report = run(BASE, &[&patch], &["API_KEY"]).unwrap();
        let object = report.failures[0].object.as_ref().unwrap();
        assert_eq!(
            (object.namespace.as_str(), object.name.as_str()),
            (namespace, "app"),
            "{meta}"
        );
        assert_eq!(
            codes(&report),
            vec![(
                "value-differs".into(),
                "LOG_LEVEL".into(),
                "overlay overlay.yaml".into()
            )],
            "{meta}"
        );
    }
    // `namespace: ""` is left out, as kubectl and kustomize take it: in the
    // base (the overlay's namespace is then the rendered object's) and in
    // the overlay (the base's is).
    let empty = BASE.replace("{ name: app }", "{ name: app, namespace: \"\" }");
    for (base, meta, namespace) in [
        (empty.as_str(), "{ name: app, namespace: prod }", "prod"),
        (empty.as_str(), "{ name: app }", "default"),
        (BASE, "{ name: app, namespace: \"\" }", "default"),
    ] {
        let patch = format!("kind: ConfigMap\nmetadata: {meta}\ndata: {{ LOG_LEVEL: debug }}\n");
        let report = run(base, &[&patch], &["API_KEY"]).unwrap();
        let object = report.failures[0].object.as_ref().unwrap();
        assert_eq!(object.namespace, namespace, "{base} {meta}");
    }
}

#[test]
fn an_overlay_may_leave_out_its_kind_and_api_version() {
    // A strategic-merge patch names only what it changes.
    let bare = "metadata: { name: app }\ndata: { LOG_LEVEL: debug }\n";
    let report = run(BASE, &[bare], &["API_KEY"]).unwrap();
    assert_eq!(
        codes(&report),
        vec![(
            "value-differs".into(),
            "LOG_LEVEL".into(),
            "overlay overlay.yaml".into()
        )]
    );
    let agreeing = "metadata: { name: app }\ndata: { LOG_LEVEL: info }\n";
    assert!(run(BASE, &[agreeing], &["API_KEY"]).unwrap().is_safe());
}
