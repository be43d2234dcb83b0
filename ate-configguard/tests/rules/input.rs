//! Unusable input: Helm output that is not manifests; thread safety of inputs and reports.

use super::*;

#[test]
fn helm_dry_run_output_is_unusable_input_saying_what_to_give_instead() {
    // `helm upgrade --dry-run` wraps the manifests in a release summary:
    // not YAML at all after `helm upgrade`, a document without a kind
    // after `helm install`. Both were exit 2 without a word on why.
    let manifests = docs(&[&cm("cfg", &["DB_HOST"]), &deployment("web", KEYREF)]);
    let install = format!(
        "NAME: app\nLAST DEPLOYED: Mon Nov 30 09:10:00 2026\nNAMESPACE: default\n\
         STATUS: pending-install\nREVISION: 1\nTEST SUITE: None\nHOOKS:\nMANIFEST:\n---\n\
         {manifests}\nNOTES:\n1. Get the application URL by running these commands:\n"
    );
    let upgrade = format!("Release \"app\" has been upgraded. Happy Helming!\n{install}");
    for text in [install, upgrade] {
        let err = load_err(&text).to_string();
        assert!(
            err.contains("`helm install` or `helm upgrade` prints with `--dry-run`")
                && err.contains("`helm template`"),
            "{err}"
        );
    }
    // Manifests alone load.
    assert!(run(NOTHING, &manifests).is_safe());
    // Unusable input with only one of the two marks gets no such hint:
    // `helm status` (a release summary, no manifests) and a document with
    // a `MANIFEST:` key.
    let status = "NAME: app\nLAST DEPLOYED: Mon Nov 30 09:10:00 2026\nNAMESPACE: default\n\
                  STATUS: deployed\nREVISION: 3\nTEST SUITE: None\n";
    let keyed = "MANIFEST:\n  name: app\n";
    for text in [status, keyed] {
        let err = load_err(text).to_string();
        assert!(!err.contains("--dry-run"), "{text}: {err}");
    }
}

#[test]
fn an_unrendered_helm_template_is_unusable_input_saying_to_render_it() {
    // `--proposed chart/templates/` instead of what `helm template`
    // renders: an action where YAML wants a key or a value is a parse
    // error, one inside quotes an invalid name; both were exit 2 without
    // a word on why.
    let templates = [
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\ndata:\n  A: \"1\"\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  A: \"1\"\n  {{- if .Values.debug }}\n  DEBUG: \"1\"\n  {{- end }}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels:\n    {{- include \"app.labels\" . | nindent 4 }}\ndata: {A: x}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"{{ .Release.Name }}-cfg\"\ndata: {A: x}\n",
    ];
    for text in templates {
        let err = load_err(text).to_string();
        assert!(
            err.contains("if this is a Helm chart's template") && err.contains("`helm template`"),
            "{err}"
        );
    }
    // A rendered ConfigMap may hold Go templates in its values (an
    // alerting template): it loads, and an error about something else in
    // it gets no hint.
    let alerts = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: alerts\ndata:\n  msg.tmpl: '{{ .Labels.instance }} is down'\n";
    assert!(run(NOTHING, alerts).is_safe());
    let bad_name = docs(&[
        alerts,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\ndata: {A: x}\n",
    ]);
    let err = load_err(&bad_name).to_string();
    assert!(err.contains("Bad_Name"), "{err}");
    assert!(!err.contains("Helm chart's template"), "{err}");
    // A parse error in text without an action gets no hint either.
    let err = load_err("kind: [\n").to_string();
    assert!(!err.contains("Helm chart's template"), "{err}");
}

#[test]
fn inputs_reports_and_errors_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CheckInput>();
    check::<ate_configguard::Manifests>();
    check::<Inventory>();
    check::<ate_configguard::Report>();
    check::<ate_configguard::InputError>();
}
