//! Breaks that real manifests slipped past the guard (issue #68), each on
//! a minimal manifest after the public project it came from.
//!
//! Attribution: the ConfigMap and Pod shapes follow the Kubernetes
//! documentation's "Configure a Pod to Use a ConfigMap" task
//! (kubernetes/website, content under CC BY 4.0) and the
//! kubernetes/examples volume plugin samples (Apache-2.0); names and
//! values here are our own.

mod common;

use common::*;
use proptest::prelude::*;

/// A ConfigMap `game-config` holding `data` keys and `binaryData` keys.
fn config(data: &[&str], binary: &[&str]) -> String {
    let mut out = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: game-config\n");
    if !data.is_empty() {
        out.push_str("data:\n");
        for k in data {
            out.push_str(&format!("  {k}: v\n"));
        }
    }
    if !binary.is_empty() {
        out.push_str("binaryData:\n");
        for k in binary {
            out.push_str(&format!("  {k}: dg==\n"));
        }
    }
    out
}

const ENV_KEY_REF: &str = "      containers:\n        - name: app\n          image: a\n          env:\n            - name: LIVES\n              valueFrom:\n                configMapKeyRef: { name: game-config, key: lives }\n";
const ENV_FROM: &str = "      containers:\n        - name: app\n          image: a\n          envFrom:\n            - configMapRef: { name: game-config }\n";
const VOLUME: &str = "      containers:\n        - name: app\n          image: a\n          volumeMounts: [ { name: cfg, mountPath: /etc/game } ]\n      volumes:\n        - name: cfg\n          configMap: { name: game-config }\n";
const VOLUME_ITEM: &str = "      containers:\n        - name: app\n          image: a\n          volumeMounts: [ { name: cfg, mountPath: /etc/game } ]\n      volumes:\n        - name: cfg\n          configMap: { name: game-config, items: [ { key: lives, path: lives } ] }\n";

#[test]
fn a_key_moved_to_binary_data_breaks_an_env_key_reference() {
    let current = docs(&[&config(&["lives"], &[]), &deployment("game", ENV_KEY_REF)]);
    let proposed = docs(&[&config(&[], &["lives"]), &deployment("game", ENV_KEY_REF)]);
    let report = run(&current, &proposed);
    assert!(!report.is_safe(), "{}", report.to_text());
    assert_eq!(
        codes(&report),
        [("missing-key".to_owned(), Some("lives".to_owned()))]
    );
    let text = report.to_text();
    assert!(text.contains("binaryData"), "{text}");
    assert!(!text.contains("dg=="), "no value ever printed: {text}");
}

#[test]
fn a_key_moved_to_binary_data_is_lost_to_env_from() {
    let current = docs(&[
        &config(&["lives", "level"], &[]),
        &deployment("game", ENV_FROM),
    ]);
    let proposed = docs(&[
        &config(&["level"], &["lives"]),
        &deployment("game", ENV_FROM),
    ]);
    let report = run(&current, &proposed);
    assert_eq!(
        codes(&report),
        [("bulk-key-removed".to_owned(), Some("lives".to_owned()))],
        "{}",
        report.to_text()
    );
}

#[test]
fn a_volume_reads_binary_data_so_the_move_is_safe_there() {
    for reader in [VOLUME, VOLUME_ITEM] {
        let current = docs(&[&config(&["lives"], &[]), &deployment("game", reader)]);
        let proposed = docs(&[&config(&[], &["lives"]), &deployment("game", reader)]);
        let report = run(&current, &proposed);
        assert!(report.is_safe(), "{}", report.to_text());
    }
}

proptest! {
    /// For generated states: a key moved from `data` to `binaryData` fails
    /// exactly when an `env` or `envFrom` reader of it exists.
    #[test]
    fn a_move_to_binary_data_fails_exactly_when_env_reads_the_key(
        readers in proptest::sample::subsequence(vec![ENV_KEY_REF, ENV_FROM, VOLUME, VOLUME_ITEM], 0..=4),
        others in proptest::collection::btree_set("[a-z]{1,6}", 0..4),
    ) {
        let others: Vec<&str> = others.iter().map(String::as_str).filter(|k| *k != "lives").collect();
        let mut current_data = others.clone();
        current_data.push("lives");
        let mut parts_current = vec![config(&current_data, &[])];
        let mut parts_proposed = vec![config(&others, &["lives"])];
        for (i, reader) in readers.iter().enumerate() {
            let d = deployment(&format!("game{i}"), reader);
            parts_current.push(d.clone());
            parts_proposed.push(d);
        }
        let report = run(&parts_current.join("\n---\n"), &parts_proposed.join("\n---\n"));
        let env_reads = readers.iter().any(|r| *r == ENV_KEY_REF || *r == ENV_FROM);
        prop_assert_eq!(!report.is_safe(), env_reads, "{}", report.to_text());
    }
}

/// A Deployment mounting one file of `game-config` by `subPath`, the file
/// projected under `path` by the volume's `items`.
fn sub_path_mount(path: &str, sub_path: &str) -> String {
    deployment(
        "game",
        &format!(
            "      containers:\n        - name: app\n          image: a\n          volumeMounts:\n            - {{ name: cfg, mountPath: /etc/game/settings.properties, subPath: {sub_path} }}\n      volumes:\n        - name: cfg\n          configMap:\n            name: game-config\n            items: [ {{ key: game.properties, path: {path} }} ]\n"
        ),
    )
}

#[test]
fn a_sub_path_beside_a_renamed_item_path_is_an_empty_directory() {
    let config = config(&["game.properties"], &[]);
    let current = docs(&[
        &config,
        &sub_path_mount("settings.properties", "settings.properties"),
    ]);
    let proposed = docs(&[
        &config,
        &sub_path_mount("game.properties", "settings.properties"),
    ]);
    assert!(run(&current, &current).is_safe());
    let report = run(&current, &proposed);
    assert_eq!(
        codes(&report),
        [(
            "missing-key".to_owned(),
            Some("settings.properties".to_owned())
        )],
        "{}",
        report.to_text()
    );
    assert!(
        report.to_text().contains("empty directory"),
        "{}",
        report.to_text()
    );
    // Both renamed together: fine.
    let both = docs(&[
        &config,
        &sub_path_mount("game.properties", "game.properties"),
    ]);
    assert!(run(&current, &both).is_safe());
}

#[test]
fn a_projected_volume_checks_its_sub_path_against_its_items() {
    let projected = |path: &str| {
        deployment(
            "game",
            &format!(
                "      containers:\n        - name: app\n          image: a\n          volumeMounts:\n            - {{ name: cfg, mountPath: /etc/game/a, subPath: settings.properties }}\n      volumes:\n        - name: cfg\n          projected:\n            sources:\n              - configMap:\n                  name: game-config\n                  items: [ {{ key: game.properties, path: {path} }} ]\n"
            ),
        )
    };
    let config = config(&["game.properties"], &[]);
    let current = docs(&[&config, &projected("settings.properties")]);
    let proposed = docs(&[&config, &projected("other.properties")]);
    assert!(run(&current, &current).is_safe());
    assert!(!run(&current, &proposed).is_safe());
}

#[test]
fn a_sub_path_expr_with_variables_on_a_config_volume_fails_closed() {
    let mount = deployment(
        "game",
        "      containers:\n        - name: app\n          image: a\n          volumeMounts:\n            - { name: cfg, mountPath: /etc/game/a, subPathExpr: $(POD_NAME).properties }\n      volumes:\n        - name: cfg\n          configMap: { name: game-config }\n",
    );
    let err = load_err(&docs(&[&config(&["a"], &[]), &mount])).to_string();
    assert!(err.contains("subPathExpr"), "{err}");
    // Without variables it is a subPath, checked as one.
    let literal = deployment(
        "game",
        "      containers:\n        - name: app\n          image: a\n          volumeMounts:\n            - { name: cfg, mountPath: /etc/game/a, subPathExpr: a }\n      volumes:\n        - name: cfg\n          configMap: { name: game-config }\n",
    );
    let current = docs(&[&config(&["a"], &[]), &literal]);
    let proposed = docs(&[&config(&["b"], &[]), &literal]);
    assert!(!run(&current, &proposed).is_safe());
}

#[test]
fn deleting_or_retiring_an_object_that_is_not_there_is_a_usage_error_naming_it() {
    use ate_configguard::{
        CheckInput, Deletion, check,
        manifest::{parse_object_id, parse_retired_key},
    };
    let state = docs(&[&cm("app-config", &["a"]), &deployment("web", ENV_FROM)]);
    let input = |delete: &[&str], retired: &[&str]| CheckInput {
        current: load(&state),
        proposed: load(&state),
        inventory: None,
        deletion: Deletion::Listed,
        delete: delete.iter().map(|d| parse_object_id(d).unwrap()).collect(),
        retired: retired
            .iter()
            .map(|r| parse_retired_key(r).unwrap())
            .collect(),
    };
    // A typo: exit 2, naming it and the object meant.
    let err = check(&input(&["ConfigMap/default/app-confg"], &[])).unwrap_err();
    assert!(
        matches!(err, ate_configguard::InputError::Invalid { .. }),
        "{err}"
    );
    assert_eq!(ate_configguard::InputError::EXIT_CODE, 2);
    let text = err.to_string();
    assert!(
        text.contains("--delete") && text.contains("app-confg"),
        "{text}"
    );
    assert!(
        text.contains("did you mean ConfigMap/default/app-config"),
        "{text}"
    );
    // The wrong namespace.
    let err = check(&input(&["ConfigMap/prod/app-config"], &[])).unwrap_err();
    assert!(
        err.to_string()
            .contains("did you mean ConfigMap/default/app-config"),
        "{err}"
    );
    // Nothing close: no guess.
    let err = check(&input(&["Secret/default/zzz"], &[])).unwrap_err();
    assert!(!err.to_string().contains("did you mean"), "{err}");
    let err = check(&input(&[], &["ConfigMap/default/app-confg/a"])).unwrap_err();
    assert!(err.to_string().contains("--retire-key"), "{err}");
    // There: checked as before (deleting what the workload loads fails).
    let mut there = input(&["ConfigMap/default/app-config"], &[]);
    there.proposed = load(&deployment("web", ENV_FROM));
    let report = check(&there).unwrap();
    assert!(!report.is_safe(), "{}", report.to_text());
}

const SECRET_KEY_REF: &str = "      containers:\n        - name: app\n          image: a\n          env:\n            - name: PASSWORD\n              valueFrom:\n                secretKeyRef: { name: db, key: password }\n";

#[test]
fn reclassified_only_when_the_object_really_moved_between_kinds() {
    use ate_configguard::Deletion;
    // An unrelated ConfigMap of the same name was there all along: the
    // Secret's deletion is a deletion.
    let current = docs(&[
        &secret("db", &["password"]),
        &cm("db", &["host"]),
        &deployment("web", SECRET_KEY_REF),
    ]);
    let proposed = docs(&[&cm("db", &["host"]), &deployment("web", SECRET_KEY_REF)]);
    let report = run_with(
        &current,
        &proposed,
        Deletion::Listed,
        &["Secret/default/db"],
    );
    assert_eq!(
        codes(&report),
        [("missing-object".to_owned(), Some("password".to_owned()))],
        "{}",
        report.to_text()
    );
    assert!(!report.to_text().contains("moved between kinds"));
    // The Secret gone and a ConfigMap of its name new: a move.
    let current = docs(&[
        &secret("db", &["password"]),
        &deployment("web", SECRET_KEY_REF),
    ]);
    let proposed = docs(&[&cm("db", &["password"]), &deployment("web", SECRET_KEY_REF)]);
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    assert_eq!(codes(&report)[0].0, "reclassified", "{}", report.to_text());
}

#[test]
fn a_wrong_key_of_the_platforms_root_ca_is_a_missing_key_naming_the_one_it_holds() {
    // After the Kubernetes documentation's service-account CA mount.
    let reader = "      containers:\n        - name: app\n          image: a\n          env:\n            - name: CA\n              valueFrom:\n                configMapKeyRef: { name: kube-root-ca.crt, key: ca.pem }\n";
    let state = deployment("web", reader);
    let report = run(&state, &state);
    assert_eq!(
        codes(&report),
        [("missing-key".to_owned(), Some("ca.pem".to_owned()))],
        "{}",
        report.to_text()
    );
    let text = report.to_text();
    assert!(text.contains("holds only the key ca.crt"), "{text}");
    assert!(!text.contains("exists in neither"), "{text}");
    // The right key resolves without the object in the input.
    let right = deployment("web", &reader.replace("ca.pem", "ca.crt"));
    assert!(run(&right, &right).is_safe());
}

#[test]
fn input_errors_say_where_in_user_terms_never_rust_debug_text() {
    // Nesting past the parser's budget (a YAML bomb shape).
    let deep = format!("a: {}{}\n", "[".repeat(70), "]".repeat(70));
    let text = load_err(&deep).to_string();
    assert!(
        !text.contains("Depth {") && !text.contains("budget breached"),
        "{text}"
    );
    assert!(text.contains("nested") && text.contains("line 1"), "{text}");
    // A document's error names the line the document starts on.
    let second = docs(&[
        &cm("ok", &["a"]),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: w }\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          image: b\n          env:\n            - name: X\n              valueFrom:\n                configMapKeyRef: { name: c }\n",
    ]);
    let text = load_err(&second).to_string();
    assert!(text.contains("document 2 (line 9)"), "{text}");
}

#[test]
fn a_persistent_volume_is_a_core_kind_not_an_unknown_one() {
    // After kubernetes/examples' CSI volume samples.
    let pv = "apiVersion: v1\nkind: PersistentVolume\nmetadata: { name: pv1 }\nspec:\n  capacity: { storage: 1Gi }\n  accessModes: [ ReadWriteOnce ]\n  csi:\n    driver: example.csi.k8s.io\n    volumeHandle: h1\n    nodePublishSecretRef: { name: csi-creds, namespace: default }\n";
    let text = load_err(pv).to_string();
    assert!(text.contains("PersistentVolume (core/v1)"), "{text}");
    assert!(!text.contains("unknown kind"), "{text}");
    assert!(text.contains("--allow-kind PersistentVolume"), "{text}");
}

#[test]
fn the_helm_hint_comes_only_with_template_syntax_where_yaml_is_written() {
    let hinted = |yaml: &str| load_err(yaml).to_string().contains("helm template");
    // A chart's template: an action line, an unquoted value.
    assert!(hinted(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  a: \"b\n"
    ));
    assert!(hinted(
        "{{- if .Values.enabled }}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  a: \"b\n{{- end }}\n"
    ));
    // A rendered dashboard: `{{` in a quoted legend and in a block scalar;
    // the parse error is another one, and says nothing of Helm.
    // (After grafana/grafana's dashboard JSON in a kube-prometheus ConfigMap.)
    let rendered = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dash}\ndata:\n  legend: \"{{ pod }}\"\n  alert.tmpl: |\n    {{ define \"x\" }}{{ .Labels }}{{ end }}\n  broken: \"unclosed\n";
    let text = load_err(rendered).to_string();
    assert!(!text.contains("helm template"), "{text}");
}

#[test]
fn a_break_only_the_current_template_has_suggests_the_two_step_fix() {
    // The proposed template stops reading the key in the same change that
    // removes it: the current pods break during the rollout.
    let current = docs(&[&config(&["lives"], &[]), &deployment("game", ENV_KEY_REF)]);
    let proposed = docs(&[&config(&[], &[]), &deployment("game", VOLUME)]);
    let report = run(&current, &proposed);
    assert!(!report.is_safe());
    let text = report.to_text();
    assert!(text.contains("(current)"), "{text}");
    assert!(text.contains("in an earlier step of its own"), "{text}");
}

#[test]
fn mixed_namespaces_in_a_chart_suggest_the_namespace_that_resolves_them() {
    // A chart rendering its ConfigMap with `namespace: game` and its
    // Deployment with none (left to `helm install -n game`).
    let placed = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: game-config\n  namespace: game\ndata:\n  lives: v\n";
    let state = docs(&[placed, &deployment("game", ENV_KEY_REF)]);
    let report = run(&state, &state);
    let text = report.to_text();
    assert!(!report.is_safe(), "{text}");
    assert!(text.contains("give --namespace game"), "{text}");
}

#[test]
fn field_paths_in_errors_have_no_rust_type_segments() {
    let wrong_type = deployment(
        "web",
        "      containers:\n        - name: a\n          image: b\n          ports: [ { containerPort: \"x\" } ]\n",
    );
    let text = load_err(&wrong_type).to_string();
    assert!(
        text.contains("containers[0].ports[0].containerPort"),
        "{text}"
    );
    let unknown = deployment(
        "web",
        "      containers:\n        - name: a\n          image: b\n          env:\n            - name: X\n              valueFrom: { vaultRef: { name: v } }\n",
    );
    let text = load_err(&unknown).to_string();
    assert!(
        text.contains("containers[0].env[0].valueFrom.vaultRef"),
        "{text}"
    );
    assert!(!text.contains(".?"), "{text}");
}

#[test]
fn yaml_punctuation_in_a_parse_error_is_shown_and_values_never() {
    let text = load_err("a: {x: 1\n").to_string();
    assert!(text.contains("unclosed bracket '{'"), "{text}");
    let text = load_err("a: [1, 2}}\n").to_string();
    assert!(text.contains("'[' closed by '}'"), "{text}");
    // A value stays out, even one a character long.
    let text = load_err("kind: ConfigMap\nmetadata: {name: x}\ndata: {a: \"s3cr3t}\n").to_string();
    assert!(!text.contains("s3cr3t"), "{text}");
}

#[test]
fn a_state_of_crds_and_no_workload_beside_workloads_may_be_truncated() {
    // After cert-manager's install: its CRDs first, then the rest.
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: { name: certificates.cert-manager.io }\nspec: { group: cert-manager.io, names: { kind: Certificate, plural: certificates }, scope: Namespaced, versions: [] }\n";
    let full = docs(&[crd, &config(&["lives"], &[]), &deployment("game", VOLUME)]);
    let report = run(&full, crd);
    let warned: Vec<&str> = report.warnings.iter().map(|w| w.code.as_str()).collect();
    assert!(warned.contains(&"maybe-truncated"), "{}", report.to_text());
    assert!(report.to_text().contains("may be truncated"));
    // Both complete: no such warning.
    let report = run(&full, &full);
    assert!(
        report
            .warnings
            .iter()
            .all(|w| w.code.as_str() != "maybe-truncated")
    );
}
