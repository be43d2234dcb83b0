//! Mutated manifests never panic the loader, the check or the drift check:
//! whatever the text, the answer is a report or an input error.

use std::collections::BTreeSet;

use ate_configguard::{
    CheckInput, Deletion, LoadOptions, Source, check, drift, load_str,
    manifest::{Inventory, parse_object_id, unplaced_namespace},
    text::decode_text,
};
use proptest::prelude::*;

/// Manifests that reach most of the loader: every workload shape, every
/// reference site, the controllers that make Secrets, hooks, waves,
/// Lists, flow style, anchors and JSON.
const SEEDS: &[&str] = &[
    r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: prod
  annotations: {argocd.argoproj.io/sync-wave: "2", helm.sh/resource-policy: keep}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      serviceAccountName: web
      imagePullSecrets: [{name: regcred}]
      initContainers:
      - name: init
        image: busybox
        envFrom: [{configMapRef: {name: base, optional: true}, prefix: B_}]
      containers:
      - name: app
        image: nginx
        env:
        - {name: A, valueFrom: {configMapKeyRef: {name: app, key: a}}}
        - {name: P, valueFrom: {secretKeyRef: {name: creds, key: pass, optional: false}}}
        - {name: F, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        envFrom: [{secretRef: {name: bulk}}]
        volumeMounts: [{name: cfg, mountPath: /etc/cfg}]
      volumes:
      - name: cfg
        configMap: {name: files, items: [{key: x.yaml, path: x.yaml}]}
      - name: tls
        secret: {secretName: tls, items: [{key: tls.crt, path: c}]}
      - name: proj
        projected:
          sources:
          - configMap: {name: p1, items: [{key: k, path: k}]}
          - secret: {name: p2}
          - serviceAccountToken: {path: t}
      - name: csi
        csi: {driver: x, nodePublishSecretRef: {name: csi}}
"#,
    r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: app, namespace: prod, annotations: {helm.sh/hook: pre-upgrade, helm.sh/hook-weight: "-1"}}
  data: {a: "1", b: "2"}
  immutable: true
- apiVersion: v1
  kind: Secret
  type: kubernetes.io/dockerconfigjson
  metadata: {name: regcred, namespace: prod}
  data: {.dockerconfigjson: e30=}
- apiVersion: v1
  kind: ServiceAccount
  metadata: {name: web, namespace: prod}
  imagePullSecrets: [{name: regcred}]
- apiVersion: batch/v1
  kind: CronJob
  metadata: {name: nightly, namespace: prod}
  spec:
    schedule: "@daily"
    suspend: true
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: j
              image: busybox
              env: [{name: A, valueFrom: {configMapKeyRef: {name: app, key: b}}}]
"#,
    r#"apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: es, namespace: prod}
spec:
  secretStoreRef: {name: vault, kind: ClusterSecretStore}
  target:
    name: creds
    template:
      type: Opaque
      mergePolicy: Merge
      data: {pass: "{{ .p }}"}
  data:
  - secretKey: user
    remoteRef: {key: db, property: user}
---
apiVersion: bitnami.com/v1alpha1
kind: SealedSecret
metadata: {name: sealed, namespace: prod}
spec:
  encryptedData: {k: AgB}
  template: {type: Opaque, immutable: true, data: {extra: x}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: cert, namespace: prod}
spec:
  secretName: tls
  keystores: {pkcs12: {create: true}}
---
apiVersion: secrets-store.csi.x-k8s.io/v1
kind: SecretProviderClass
metadata: {name: spc, namespace: prod}
spec:
  provider: vault
  secretObjects:
  - secretName: csi
    type: Opaque
    data: [{objectName: a, key: k}]
"#,
    r#"apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: ro, namespace: prod}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing, namespace: prod}
spec:
  tls: [{secretName: tls, hosts: [a.example]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: prod}
spec:
  listeners:
  - name: https
    tls: {certificateRefs: [{name: tls}], frontendValidation: {caCertificateRefs: [{kind: ConfigMap, group: "", name: ca}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}}
spec:
  containers: [{name: c, image: x, env: [{name: E, valueFrom: {secretKeyRef: {name: s, key: k}}}]}]
status: {phase: Succeeded}
"#,
    r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db","namespace":"prod"},"spec":{"serviceName":"db","selector":{"matchLabels":{"a":"b"}},"template":{"spec":{"containers":[{"name":"c","image":"x","env":[{"name":"X","valueFrom":{"configMapKeyRef":{"name":"app","key":"a"}}}]}]}}}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"files","namespace":"prod"},"data":{"x.yaml":"a: 1"},"binaryData":{"b":"AA=="}}]}"#,
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: defaults\ndata:\n  ATE_A: \"1\"\n  ATE_B: two\n",
];

/// Fragments that YAML and JSON readers trip on.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "\n",
    "\n  ",
    "  ",
    "\t",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\"",
    "'",
    "#",
    "&a ",
    "*a",
    "<<: *a\n",
    "!!binary ",
    "!!str ",
    "!tag ",
    "? ",
    "|\n",
    ">-\n",
    "---\n",
    "...\n",
    "~",
    "null",
    "true",
    "0",
    "-1",
    "1e400",
    "18446744073709551616",
    "0x1F",
    "\u{0}",
    "\u{feff}",
    "é",
    "名",
    "kind: List\nitems:\n",
    "items: ",
    "name: ",
    "key: ",
    "namespace: ",
    "optional: true",
    "data:",
    "spec:",
    "template:",
    "containers: []",
    "metadata: {}",
    "apiVersion: v1\n",
];

/// Words the loader looks for, to swap in for another word: the text
/// stays YAML more often, and reaches the paths that read it.
const WORDS: &[&str] = &[
    "name",
    "key",
    "items",
    "optional",
    "env",
    "envFrom",
    "valueFrom",
    "configMapKeyRef",
    "secretKeyRef",
    "configMapRef",
    "secretRef",
    "configMap",
    "secret",
    "secretName",
    "projected",
    "sources",
    "volumes",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "template",
    "spec",
    "metadata",
    "namespace",
    "data",
    "stringData",
    "binaryData",
    "immutable",
    "kind",
    "apiVersion",
    "List",
    "ConfigMap",
    "Secret",
    "Deployment",
    "Pod",
    "Job",
    "CronJob",
    "ServiceAccount",
    "imagePullSecrets",
    "serviceAccountName",
    "workloadRef",
    "ReplicaSet",
    "PodTemplate",
    "secretObjects",
    "target",
    "creationPolicy",
    "dataFrom",
    "templateFrom",
    "mergePolicy",
    "Merge",
    "None",
    "Owner",
    "type",
    "hook",
    "status",
    "phase",
    "replicas",
    "0",
    "Succeeded",
    "annotations",
    "helm.sh/hook",
    "pre-install",
    "post-upgrade",
    "PreSync",
    "certificateRefs",
    "caCertificateRefs",
    "group",
    "v1",
    "apps/v1",
    "prefix",
    "null",
    "[]",
    "{}",
    "\"\"",
];

#[derive(Debug, Clone)]
enum Edit {
    ReplaceWord { nth: usize, word: usize },
    Delete { at: usize, len: usize },
    Insert { at: usize, token: usize },
    DuplicateLine { line: usize },
    SwapLines { a: usize, b: usize },
    Truncate { at: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => (any::<usize>(), 0..WORDS.len()).prop_map(|(nth, word)| Edit::ReplaceWord { nth, word }),
        3 => (any::<usize>(), 1..40usize).prop_map(|(at, len)| Edit::Delete { at, len }),
        4 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, token)| Edit::Insert { at, token }),
        1 => any::<usize>().prop_map(|line| Edit::DuplicateLine { line }),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines { a, b }),
        1 => any::<usize>().prop_map(|at| Edit::Truncate { at }),
    ]
}

/// The char boundary at or before `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut i = at % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The byte spans of the words (letters, digits, `.`, `/`, `-`) in `text`.
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let in_word = c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-');
        match (start, in_word) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    spans
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_owned();
    for e in edits {
        match *e {
            Edit::ReplaceWord { nth, word } => {
                let words: Vec<(usize, usize)> = word_spans(&text);
                if let Some(&(from, to)) = words.get(nth % words.len().max(1)) {
                    text.replace_range(from..to, WORDS[word]);
                }
            }
            Edit::Delete { at, len } => {
                let from = boundary(&text, at);
                let to = boundary(&text, from.saturating_add(len).min(text.len()));
                text.replace_range(from..to.max(from), "");
            }
            Edit::Insert { at, token } => {
                let at = boundary(&text, at);
                text.insert_str(at, TOKENS[token]);
            }
            Edit::DuplicateLine { .. } | Edit::SwapLines { .. } if text.lines().count() == 0 => {}
            Edit::DuplicateLine { line } => {
                let mut lines: Vec<&str> = text.lines().collect();
                let i = line % lines.len();
                lines.insert(i, lines[i]);
                text = lines.join("\n");
            }
            Edit::SwapLines { a, b } => {
                let mut lines: Vec<&str> = text.lines().collect();
                let n = lines.len();
                lines.swap(a % n, b % n);
                text = lines.join("\n");
            }
            Edit::Truncate { at } => {
                let at = boundary(&text, at);
                text.truncate(at);
            }
        }
    }
    text
}

/// A seed with up to three edits (none a quarter of the time: the check
/// then meets a state it can read).
fn mutated() -> impl Strategy<Value = String> {
    (
        0..SEEDS.len(),
        prop_oneof![1 => Just(Vec::new()), 3 => prop::collection::vec(edit(), 1..4)],
    )
        .prop_map(|(s, e)| apply(SEEDS[s], &e))
}

/// 512 cases, or `PROPTEST_CASES`.
fn config() -> ProptestConfig {
    ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(512),
    )
}

/// The seeds' Rollout is allowed.
fn options() -> LoadOptions {
    LoadOptions {
        allow_kinds: ["Rollout".to_owned()].into(),
        ..LoadOptions::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_manifests_are_a_report_or_an_input_error_never_a_panic(
        current in mutated(),
        proposed in mutated(),
        prune in any::<bool>(),
    ) {
        let options = options();
        let (Ok(current), Ok(proposed)) = (
            load_str(&current, "current.yaml", &options),
            load_str(&proposed, "proposed.yaml", &options),
        ) else {
            return Ok(());
        };
        let _ = unplaced_namespace(&proposed, &current, "default");
        let input = CheckInput {
            current,
            proposed,
            inventory: None,
            deletion: if prune { Deletion::Prune } else { Deletion::Listed },
            delete: Vec::new(),
            retired: Vec::new(),
        };
        if let Ok(report) = check(&input) {
            prop_assert_eq!(report.is_safe(), report.failures.is_empty());
            let _ = report.to_text();
        }
    }

    #[test]
    fn mutated_drift_inputs_are_a_report_or_an_input_error_never_a_panic(
        base in mutated(),
        overlay in mutated(),
        defaults_edits in prop::collection::vec(edit(), 0..3),
    ) {
        let defaults = apply("{\"ATE_A\": \"1\", \"ATE_B\": \"two\"}", &defaults_edits);
        let _ = drift(
            Source { text: &defaults, name: "defaults.json" },
            Source { text: &base, name: "base.yaml" },
            &[Source { text: &overlay, name: "overlay.yaml" }],
            &BTreeSet::new(),
        );
    }
}

proptest! {
    /// What `--delete` and `--inventory` read from the command line and a
    /// file: an error or a value, never a panic.
    #[test]
    fn any_object_id_or_inventory_text_is_read_or_refused_never_a_panic(
        id in "[A-Za-z/ .:-]{0,24}",
        edits in prop::collection::vec(edit(), 0..4),
    ) {
        if let Ok(parsed) = parse_object_id(&id) {
            prop_assert!(!parsed.namespace.is_empty() && !parsed.name.is_empty());
        }
        let inventory = apply(
            r#"{"version": 1, "objects": [{"kind": "Secret", "namespace": "prod", "name": "s", "keys": ["a"], "secret_type": "Opaque"}]}"#,
            &edits,
        );
        let _ = serde_json::from_str::<Inventory>(&inventory);
    }
}

/// The seeds themselves are readable, so a mutation starts from a state
/// the check reads through.
#[test]
fn every_seed_loads() {
    let options = options();
    for (i, seed) in SEEDS.iter().enumerate() {
        if let Err(e) = load_str(seed, "seed.yaml", &options) {
            panic!("seed {i} does not load: {e}");
        }
    }
}

/// A leading byte-order mark (what Windows editors and PowerShell write) is
/// skipped, in YAML and in JSON, as kubectl skips it: every seed, and a JSON
/// form of one, reads the same with it as without.
#[test]
fn a_leading_byte_order_mark_is_skipped_in_yaml_and_json() {
    let options = options();
    let json = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": {"A": "x"}}"#;
    let json_list = format!("[{json}]");
    let texts: Vec<(&str, &str)> = SEEDS
        .iter()
        .map(|s| (*s, "seed.yaml"))
        .chain([
            (json, "cm.json"),
            (json, "-"),
            (json_list.as_str(), "list.json"),
            ("[]", "empty.json"),
            ("[]", "-"),
        ])
        .collect();
    for (text, name) in texts {
        let plain = load_str(text, name, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let marked = load_str(&format!("\u{feff}{text}"), name, &options)
            .unwrap_or_else(|e| panic!("{name} with a byte-order mark: {e}"));
        assert_eq!(format!("{marked:?}"), format!("{plain:?}"), "{name}");
    }
    // Only at the start: one inside a document is a parse error, as YAML
    // says, never a silently different document.
    assert!(
        load_str(
            "\u{feff}kind: ConfigMap\nmetadata: {name: \u{feff}}\n",
            "x.yaml",
            &options
        )
        .is_err()
    );
}

fn utf16(text: &str, big_endian: bool) -> Vec<u8> {
    let mut out = if big_endian {
        vec![0xFE, 0xFF]
    } else {
        vec![0xFF, 0xFE]
    };
    for unit in text.encode_utf16() {
        out.extend(if big_endian {
            unit.to_be_bytes()
        } else {
            unit.to_le_bytes()
        });
    }
    out
}

proptest! {
    #![proptest_config(config())]

    /// Text in UTF-8 (with or without a byte-order mark) or in UTF-16 with
    /// one decodes to the same string; any bytes at all decode or are an
    /// error naming the source, never a panic.
    #[test]
    fn utf8_and_utf16_decode_to_the_same_text_and_any_bytes_never_panic(
        text in any::<String>(),
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        mark in prop::sample::select(vec![&[][..], &[0xEF, 0xBB, 0xBF][..], &[0xFF, 0xFE][..], &[0xFE, 0xFF][..], &[0xFF, 0xFE, 0, 0][..]]),
    ) {
        let utf8 = text.as_bytes().to_vec();
        // A text that itself starts with U+FEFF loses it once as the mark.
        let expect = text.strip_prefix('\u{feff}').unwrap_or(&text);
        prop_assert_eq!(decode_text(utf8, "x.yaml").unwrap(), expect);
        let marked = [&[0xEF, 0xBB, 0xBF][..], text.as_bytes()].concat();
        prop_assert_eq!(decode_text(marked, "x.yaml").unwrap(), text.as_str());
        if !text.starts_with('\0') {
            prop_assert_eq!(decode_text(utf16(&text, false), "x.yaml").unwrap(), text.as_str());
        }
        prop_assert_eq!(decode_text(utf16(&text, true), "x.yaml").unwrap(), text.as_str());
        let any = [mark, &bytes[..]].concat();
        if let Err(e) = decode_text(any, "x.yaml") {
            prop_assert!(e.to_string().starts_with("cannot read x.yaml: "), "{}", e);
        }
    }
}

/// One to three (mutated) seeds in one stream, so that their documents
/// meet: a Secret and the SealedSecret that makes it, a Rollout and its
/// template.
fn several() -> impl Strategy<Value = String> {
    prop::collection::vec(mutated(), 1..4).prop_map(|docs| docs.join("\n---\n"))
}

/// The same documents in the reverse order.
fn reversed(text: &str) -> String {
    let mut docs: Vec<&str> = text.split("\n---\n").collect();
    docs.reverse();
    docs.join("\n---\n")
}

proptest! {
    #![proptest_config(config())]

    /// Order is no input: a state read in another document order gives the
    /// same report.
    #[test]
    fn the_order_of_documents_changes_no_report(
        current in several(),
        proposed in several(),
        prune in any::<bool>(),
    ) {
        let options = options();
        let run = |current: &str, proposed: &str| {
            let current = load_str(current, "current.yaml", &options).map_err(|e| e.to_string())?;
            let proposed = load_str(proposed, "proposed.yaml", &options).map_err(|e| e.to_string())?;
            check(&CheckInput {
                current,
                proposed,
                inventory: None,
                deletion: if prune { Deletion::Prune } else { Deletion::Listed },
                delete: Vec::new(),
                retired: Vec::new(),
            })
            .map_err(|e| e.to_string())
        };
        // Where each finding's workload was read (its document and line)
        // moves with the order; nothing else may.
        let unplaced = |r: Result<ate_configguard::Report, String>| {
            r.map(|mut r| {
                for f in r.failures.iter_mut().chain(r.warnings.iter_mut()) {
                    f.source = None;
                }
                r
            })
        };
        let ab = unplaced(run(&current, &proposed));
        let ba = unplaced(run(&reversed(&current), &reversed(&proposed)));
        match (&ab, &ba) {
            (Ok(ab), Ok(ba)) => prop_assert_eq!(ab, ba),
            // Which of two bad documents is named first may differ.
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "{:?} against {:?}", ab, ba),
        }
    }
}
