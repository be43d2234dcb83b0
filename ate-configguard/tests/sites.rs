//! Every reference site and every workload kind is scanned.

mod common;

use ate_configguard::manifest::ConfigKind;
use common::*;

const POD_SPEC: &str = r#"
      imagePullSecrets:
        - name: regcred
      initContainers:
        - name: init
          image: i
          env:
            - name: INIT_TOKEN
              valueFrom:
                secretKeyRef: { name: init-secret, key: token }
      ephemeralContainers:
        - name: debug
          image: d
          envFrom:
            - secretRef: { name: debug-secret }
      containers:
        - name: app
          image: a
          env:
            - name: PLAIN
              value: not-a-ref
            - name: FROM_FILE
              valueFrom:
                fileKeyRef: { path: env.txt, key: K, volumeName: scratch }
            - name: DB
              valueFrom:
                configMapKeyRef: { name: cfg, key: DB }
          envFrom:
            - prefix: APP_
              configMapRef: { name: bulk-cm }
          volumeMounts:
            - name: cm-vol
              mountPath: /etc/one
              subPath: one.conf
            - name: nested-items
              mountPath: /etc/app.yaml
              subPath: conf/app.yaml
            - name: sec-vol
              mountPath: /etc/tls
              subPath: ""
            - name: sec-items
              mountPath: /etc/user
              subPath: user
      volumes:
        - name: scratch
          emptyDir: {}
        - name: cm-vol
          configMap: { name: files-cm }
        - name: cm-items
          configMap:
            name: items-cm
            items: [ { key: a.conf, path: a.conf } ]
        - name: nested-items
          configMap:
            name: nested-cm
            items: [ { key: app.yaml, path: conf/app.yaml } ]
        - name: sec-vol
          secret: { secretName: tls }
        - name: sec-items
          secret:
            secretName: creds
            items: [ { key: user, path: user } ]
        - name: proj
          projected:
            sources:
              - configMap: { name: proj-cm }
              - secret:
                  name: proj-secret
                  items: [ { key: p, path: p } ]
        - name: csi
          csi: { driver: x, nodePublishSecretRef: { name: csi-secret } }
        - name: ceph
          cephfs: { monitors: [m], secretRef: { name: ceph-secret } }
        - name: rbd
          rbd: { monitors: [m], image: i, secretRef: { name: rbd-secret } }
        - name: iscsi
          iscsi: { targetPortal: t, iqn: q, lun: 0, secretRef: { name: iscsi-secret } }
        - name: cinder
          cinder: { volumeID: v, secretRef: { name: cinder-secret } }
        - name: flex
          flexVolume: { driver: d, secretRef: { name: flex-secret } }
        - name: sos
          storageos: { volumeName: v, secretRef: { name: sos-secret } }
        - name: sio
          scaleIO: { gateway: g, system: s, secretRef: { name: sio-secret } }
        - name: az
          azureFile: { secretName: az-secret, shareName: s }
"#;

fn refs() -> Vec<(String, ConfigKind, String, Option<String>, bool)> {
    let m = load(&deployment("web", POD_SPEC));
    m.workloads[0]
        .references
        .iter()
        .map(|r| {
            (
                r.site.clone(),
                r.kind,
                r.name.clone(),
                r.key.clone(),
                r.bulk,
            )
        })
        .collect()
}

#[test]
fn every_reference_site_is_found() {
    let refs = refs();
    let has = |name: &str, kind: ConfigKind, key: Option<&str>, bulk: bool| {
        assert!(
            refs.iter()
                .any(|r| r.2 == name && r.1 == kind && r.3.as_deref() == key && r.4 == bulk),
            "missing {name} {kind:?} {key:?} bulk={bulk} in {refs:#?}"
        );
    };
    use ConfigKind::*;
    has("regcred", Secret, None, false);
    has("init-secret", Secret, Some("token"), false);
    has("debug-secret", Secret, None, true);
    has("cfg", ConfigMap, Some("DB"), false);
    has("bulk-cm", ConfigMap, None, true);
    has("files-cm", ConfigMap, None, true);
    has("files-cm", ConfigMap, Some("one.conf"), false); // subPath
    has("items-cm", ConfigMap, Some("a.conf"), false);
    has("tls", Secret, None, true);
    has("creds", Secret, Some("user"), false);
    has("proj-cm", ConfigMap, None, true);
    has("proj-secret", Secret, Some("p"), false);
    for s in [
        "csi-secret",
        "ceph-secret",
        "rbd-secret",
        "iscsi-secret",
        "cinder-secret",
        "flex-secret",
        "sos-secret",
        "sio-secret",
        "az-secret",
    ] {
        // The plugin is handed every key: loaded whole.
        has(s, Secret, None, true);
    }
    assert!(refs.iter().any(|r| r.0.contains("prefix APP_")));
    // A subPath into an item's directory reads that item's key: found by
    // the path's first part, and reported at the mount too.
    has("nested-cm", ConfigMap, Some("app.yaml"), false);
    assert!(
        refs.iter()
            .any(|r| r.0 == "volumeMounts[nested-items].subPath"
                && r.2 == "nested-cm"
                && r.3.as_deref() == Some("app.yaml")),
        "{refs:#?}"
    );
    // So does one into a Secret's item.
    assert!(
        refs.iter().any(|r| r.0 == "volumeMounts[sec-items].subPath"
            && r.1 == Secret
            && r.2 == "creds"
            && r.3.as_deref() == Some("user")),
        "{refs:#?}"
    );
    // fileKeyRef and plain values are not ConfigMap/Secret references,
    // and an empty subPath is no subPath (the whole volume is mounted).
    assert_eq!(refs.len(), 24, "{refs:#?}");
}

#[test]
fn every_workload_kind_is_read() {
    let c = "containers: [ { name: c, image: i, envFrom: [ { configMapRef: { name: x } } ] } ]";
    let docs = [
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{ name: p }}\nspec: {{ {c} }}"),
        format!(
            "apiVersion: v1\nkind: PodTemplate\nmetadata: {{ name: pt }}\ntemplate: {{ spec: {{ {c} }} }}"
        ),
        format!(
            "apiVersion: v1\nkind: ReplicationController\nmetadata: {{ name: rc }}\nspec: {{ template: {{ spec: {{ {c} }} }} }}"
        ),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{ name: d }}\nspec: {{ template: {{ spec: {{ {c} }} }} }}"
        ),
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{ name: s }}\nspec: {{ serviceName: s, template: {{ spec: {{ {c} }} }} }}"
        ),
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{ name: ds }}\nspec: {{ template: {{ spec: {{ {c} }} }} }}"
        ),
        format!(
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{ name: rs }}\nspec: {{ template: {{ spec: {{ {c} }} }} }}"
        ),
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{ name: j }}\nspec: {{ template: {{ spec: {{ {c} }} }} }}"
        ),
        format!(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{ name: cj }}\nspec: {{ schedule: '* * * * *', jobTemplate: {{ spec: {{ template: {{ spec: {{ {c} }} }} }} }} }}"
        ),
    ];
    let m = load(&docs.join("\n---\n"));
    let kinds: Vec<&str> = m.workloads.iter().map(|w| w.id.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "Job",
            "CronJob"
        ]
    );
    assert!(m.workloads.iter().all(|w| w.references.len() == 1));
}

#[test]
fn list_wrappers_are_unwrapped_and_their_values_dropped() {
    let list = "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Secret\n    metadata: { name: s }\n    stringData: { K: hunter2 }\n  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: { name: d }\n    spec: { template: { spec: { containers: [ { name: c, image: i } ] } } }\n";
    let m = load(list);
    assert_eq!(m.objects.len(), 1);
    assert_eq!(m.objects[0].keys.iter().collect::<Vec<_>>(), ["K"]);
    assert_eq!(m.workloads.len(), 1);
    assert!(!format!("{m:?}").contains("hunter2"));
}

#[test]
fn typed_lists_of_every_kind_are_read_with_items_that_leave_out_their_kind() {
    // What the API server answers a list request (`kubectl get --raw
    // /apis/apps/v1/statefulsets`): a `StatefulSetList` whose items carry
    // no kind or apiVersion. Each must be read as its list's kind.
    let template = "spec: { template: { spec: { containers: [ { name: c, image: i, envFrom: [ { configMapRef: { name: cfg } } ] } ] } } }";
    for (list, api, body) in [
        ("PodList", "v1", "spec: { containers: [ { name: c, image: i, envFrom: [ { configMapRef: { name: cfg } } ] } ] }".to_owned()),
        ("PodTemplateList", "v1", "template: { spec: { containers: [ { name: c, image: i, envFrom: [ { configMapRef: { name: cfg } } ] } ] } }".to_owned()),
        ("ReplicationControllerList", "v1", template.to_owned()),
        ("DeploymentList", "apps/v1", template.to_owned()),
        ("StatefulSetList", "apps/v1", template.to_owned()),
        ("DaemonSetList", "apps/v1", template.to_owned()),
        ("ReplicaSetList", "apps/v1", template.to_owned()),
        ("JobList", "batch/v1", template.to_owned()),
        ("CronJobList", "batch/v1", format!("spec: {{ jobTemplate: {{ {template} }} }}")),
    ] {
        let element = list.strip_suffix("List").unwrap();
        let text = format!(
            "apiVersion: {api}\nkind: {list}\nmetadata: {{ resourceVersion: \"7\" }}\nitems:\n  - metadata: {{ name: bare }}\n    {body}\n  - apiVersion: {api}\n    kind: {element}\n    metadata: {{ name: full }}\n    {body}\n"
        );
        let m = load(&text);
        let read: Vec<_> = m
            .workloads
            .iter()
            .map(|w| (w.id.kind.as_str(), w.id.name.as_str(), w.references.len()))
            .collect();
        assert_eq!(read, [(element, "bare", 1), (element, "full", 1)], "{list}");
    }
    let secrets = "apiVersion: v1\nkind: SecretList\nitems:\n  - metadata: { name: s }\n    data: { K: aHVudGVyMg== }\n";
    let m = load(secrets);
    assert_eq!(m.objects[0].id.to_string(), "Secret/default/s");
    assert_eq!(m.objects[0].keys.iter().collect::<Vec<_>>(), ["K"]);
    let maps = "apiVersion: v1\nkind: ConfigMapList\nitems:\n  - metadata: { name: c }\n    data: { A: x }\n";
    assert_eq!(load(maps).objects[0].id.to_string(), "ConfigMap/default/c");
}

#[test]
fn json_manifests_are_read() {
    let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"},"data":{"A":"1"}}"#;
    let m = ate_configguard::load_str(json, "x.json", &Default::default()).unwrap();
    assert_eq!(m.objects[0].id.to_string(), "ConfigMap/n/c");
}

#[test]
fn a_stream_of_json_documents_is_read_as_a_yaml_stream_is() {
    // `kubectl get cm -o json | jq -c '.items[]'`: one object a line.
    let stream = concat!(
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"A":"1"}}"#,
        "\n",
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"b"},"data":{"B":"eA=="}}"#,
        "\n\n",
        r#"[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}]"#,
    );
    let m = ate_configguard::load_str(stream, "x.json", &Default::default()).unwrap();
    let names: Vec<String> = m.objects.iter().map(|o| o.id.to_string()).collect();
    assert_eq!(
        names,
        [
            "ConfigMap/default/a",
            "Secret/default/b",
            "ConfigMap/default/c"
        ]
    );
    // Anything but a whole document after one is still an error, naming
    // where it is.
    let err = ate_configguard::load_str(
        &format!("{stream}\n{{\"apiVersion\": "),
        "x.json",
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("x.json") && err.contains("line 5"), "{err}");
    let garbage = ate_configguard::load_str(&format!("{stream} x"), "x.json", &Default::default());
    assert!(garbage.is_err());
}

#[test]
fn a_stream_that_opens_with_a_json_document_and_goes_on_in_yaml_is_read() {
    // YAML holds JSON: `cat a.json; echo ---; cat b.yaml` is one YAML
    // stream. It was read as YAML the other way round, but refused (exit
    // 2) when the JSON document came first.
    let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"A":"1"}}"#;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {B: x}\n";
    let names = |text: &str| -> Vec<String> {
        let mut names: Vec<String> = load(text)
            .objects
            .iter()
            .map(|o| o.id.to_string())
            .collect();
        names.sort();
        names
    };
    let both = ["ConfigMap/default/a", "ConfigMap/default/b"];
    assert_eq!(names(&format!("{json}\n---\n{yaml}")), both);
    assert_eq!(names(&format!("{yaml}---\n{json}\n")), both);
    // What neither reads names the JSON error, as before.
    let err = load_err(&format!("{json}\n---\n{{broken")).to_string();
    assert!(err.contains("line 2"), "{err}");
    // A `.json` file is JSON alone.
    assert!(
        ate_configguard::load_str(
            &format!("{json}\n---\n{yaml}"),
            "x.json",
            &Default::default()
        )
        .is_err()
    );
}

#[test]
fn large_multi_document_files_load() {
    // Regression: the YAML parser's default budget refused more than 1,024
    // documents, which a rendered cluster easily exceeds.
    let docs: Vec<String> = (0..3_000).map(|i| cm(&format!("cm-{i}"), &["A"])).collect();
    let m = load(&docs.join("---\n"));
    assert_eq!(m.objects.len(), 3_000);
}

#[test]
fn parallel_decoding_keeps_document_order_and_reports_the_first_error() {
    let docs: Vec<String> = (0..2_000).map(|i| cm(&format!("cm-{i}"), &["A"])).collect();
    let m = load(&docs.join("---\n"));
    let names: Vec<String> = m.objects.iter().map(|o| o.id.name.clone()).collect();
    let want: Vec<String> = (0..2_000).map(|i| format!("cm-{i}")).collect();
    assert_eq!(names, want);
    let mut broken = docs.clone();
    broken[1500] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n".into();
    broken[1900] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n".into();
    let err = load_err(&broken.join("---\n")).to_string();
    assert!(err.contains("document 1501"), "{err}");
}

#[test]
fn a_big_stream_is_cut_only_at_document_markers() {
    // `---x:` at column 0 is a map key, not a document marker: cutting a
    // big stream (read in parallel chunks) there would start a chunk with
    // half a document.
    let docs: Vec<String> = (0..3_000)
        .map(|i| {
            format!(
                "{}---x: 1\n",
                cm(&format!("cm-{i}"), &[&format!("KEY_{}", "K".repeat(200))])
            )
        })
        .collect();
    let stream = docs.join("---\n");
    assert!(stream.len() > 512 * 1024, "big enough to be cut");
    let m = load(&stream);
    let names: Vec<String> = m.objects.iter().map(|o| o.id.name.clone()).collect();
    let want: Vec<String> = (0..3_000).map(|i| format!("cm-{i}")).collect();
    assert_eq!(names, want);
}

#[test]
fn a_deleted_pull_secret_an_account_names_is_one_finding_with_the_accounts_step() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: regcred}\ntype: kubernetes.io/dockerconfigjson\ndata: {.dockerconfigjson: eA==}\n";
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: app}\nimagePullSecrets: [{name: regcred}]\n";
    let web = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      serviceAccountName: app\n      containers: [{name: web, image: web:1}]\n";
    let report = run_with(
        &docs(&[secret, account, web]),
        &docs(&[account, web]),
        ate_configguard::Deletion::Listed,
        &["Secret/default/regcred"],
    );
    assert_eq!(report.failures.len(), 1, "{}", report.to_text());
    let f = &report.failures[0];
    assert_eq!(f.side, Some(ate_configguard::Side::Both));
    assert!(
        f.message.contains("ServiceAccount app names it"),
        "{}",
        f.message
    );
    assert!(
        !f.message.contains("roll out the template"),
        "{}",
        f.message
    );
}
