//! Operator resources fail closed: the prometheus-operator kinds are read
//! natively (the Secrets and ConfigMaps they mount or read are checked as
//! a pod's), an unknown kind that names a Secret or ConfigMap anywhere is
//! refused naming where, and an allow-listed one has its references read.

mod common;

use ate_configguard::{Deletion, LoadOptions, load_str};
use common::*;

fn refused(yaml: &str, options: &LoadOptions) -> String {
    match load_str(yaml, "test.yaml", options) {
        Err(e) => e.to_string(),
        Ok(m) => panic!("read, not refused: {} workloads", m.workloads.len()),
    }
}

const ALERTMANAGER: &str = "apiVersion: monitoring.coreos.com/v1\nkind: Alertmanager\n\
    metadata:\n  name: main\nspec:\n  replicas: 3\n";

#[test]
fn deleting_the_secret_an_alertmanager_loads_its_configuration_from_fails() {
    // No configSecret: the operator reads alertmanager-<name>, key
    // alertmanager.yaml, and without it runs a configuration that sends
    // alerts nowhere.
    let config = secret("alertmanager-main", &["alertmanager.yaml"]);
    let current = docs(&[ALERTMANAGER, &config]);
    let report = run_with(
        &current,
        ALERTMANAGER,
        Deletion::Listed,
        &["Secret/default/alertmanager-main"],
    );
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("alertmanager.yaml".into()))],
        "{report:?}"
    );
    // Keeping it, or naming another that holds the key, is safe.
    assert!(run(&current, &current).failures.is_empty());
    let named = ALERTMANAGER.replace("replicas: 3", "configSecret: am-config");
    let other = secret("am-config", &["alertmanager.yaml"]);
    assert!(
        run(&docs(&[&named, &other]), &docs(&[&named, &other]))
            .failures
            .is_empty()
    );
    // A configuration Secret that lost the key fails too.
    let emptied = secret("am-config", &["other.yaml"]);
    let report = run(&docs(&[&named, &other]), &docs(&[&named, &emptied]));
    // Read by name (required) and mounted whole: both say so, for the
    // current and the proposed workload.
    let mut got = codes(&report);
    got.sort();
    got.dedup();
    assert_eq!(
        got,
        vec![
            ("bulk-key-removed".into(), Some("alertmanager.yaml".into())),
            ("missing-key".into(), Some("alertmanager.yaml".into()))
        ],
        "{report:?}"
    );
}

#[test]
fn a_prometheus_that_starts_mounting_a_secret_nobody_creates_fails() {
    let prometheus = |secrets: &str| {
        format!(
            "apiVersion: monitoring.coreos.com/v1\nkind: Prometheus\nmetadata:\n  name: k8s\n\
             spec:\n  replicas: 2\n  secrets: [{secrets}]\n  configMaps: []\n"
        )
    };
    let etcd = secret("etcd-certs", &["ca.crt"]);
    let current = docs(&[&prometheus("etcd-certs"), &etcd]);
    assert!(run(&current, &current).failures.is_empty());
    let report = run(
        &current,
        &docs(&[&prometheus("etcd-certs, kube-etcd-client"), &etcd]),
    );
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{report:?}"
    );
    assert!(
        report.failures[0].to_string().contains("kube-etcd-client"),
        "{}",
        report.failures[0]
    );
}

#[test]
fn a_monitor_that_reads_a_password_key_that_goes_fails() {
    let monitor = "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  \
        name: api\nspec:\n  selector: {matchLabels: {app: api}}\n  endpoints:\n    - port: web\n      \
        basicAuth:\n        username: {name: api-scrape, key: user}\n        \
        password: {name: api-scrape, key: pass}\n      tlsConfig:\n        \
        ca: {configMap: {name: api-ca, key: ca.crt}}\n";
    let ca = cm("api-ca", &["ca.crt"]);
    let current = docs(&[monitor, &secret("api-scrape", &["user", "pass"]), &ca]);
    assert!(run(&current, &current).failures.is_empty());
    let proposed = docs(&[monitor, &secret("api-scrape", &["user"]), &ca]);
    // Once for the current workload, once for the proposed.
    assert_eq!(
        codes(&run(&current, &proposed)),
        vec![("missing-key".into(), Some("pass".into()))]
    );
    let proposed = docs(&[
        monitor,
        &secret("api-scrape", &["user", "pass"]),
        &cm("api-ca", &["other"]),
    ]);
    assert_eq!(
        codes(&run(&current, &proposed)),
        vec![("missing-key".into(), Some("ca.crt".into()))]
    );
}

const JAEGER: &str = "apiVersion: jaegertracing.io/v1\nkind: Jaeger\nmetadata:\n  name: tracing\n\
    spec:\n  strategy: production\n  volumes:\n    - name: certs\n      \
    secret: {secretName: jaeger-es-certs}\n";

#[test]
fn an_unknown_kind_that_names_a_secret_is_refused_naming_where() {
    let e = refused(JAEGER, &LoadOptions::default());
    assert!(
        e.contains("Jaeger") && e.contains("spec.volumes[0]") && e.contains("--allow-kind"),
        "{e}"
    );
    for (field, at) in [
        ("configSecret: app-config", "spec.configSecret"),
        (
            "credentialsSecretRef: {name: creds}",
            "spec.credentialsSecretRef",
        ),
        ("auth:\n    existingSecret: db", "spec.auth.existingSecret"),
        ("tls:\n    ca: {name: ca, key: ca.crt}", "spec.tls.ca"),
        ("configMaps: [dashboards]", "spec.configMaps[0]"),
    ] {
        let doc = format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  {field}\n"
        );
        let e = refused(&doc, &LoadOptions::default());
        assert!(e.contains(at), "{field}: {e}");
    }
    // One that names none is read as before: nothing to check.
    let plain =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 3\n";
    assert!(load(plain).workloads.is_empty());
}

#[test]
fn an_allow_listed_kind_has_its_volumes_and_key_references_read_like_a_pods() {
    let options = LoadOptions {
        allow_kinds: ["Jaeger".to_owned()].into(),
        ..LoadOptions::default()
    };
    let m = load_str(JAEGER, "test.yaml", &options).unwrap();
    assert_eq!(m.workloads.len(), 1);
    let current = load_str(
        &docs(&[JAEGER, &secret("jaeger-es-certs", &["ca.crt"])]),
        "c.yaml",
        &options,
    )
    .unwrap();
    let proposed = load_str(JAEGER, "p.yaml", &options).unwrap();
    let report = ate_configguard::check(&ate_configguard::CheckInput {
        current,
        proposed,
        inventory: None,
        deletion: Deletion::Listed,
        delete: vec![
            ate_configguard::manifest::parse_object_id("Secret/default/jaeger-es-certs").unwrap(),
        ],
        retired: Vec::new(),
    })
    .unwrap();
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{report:?}"
    );
}

fn allowing(kinds: &[&str]) -> LoadOptions {
    LoadOptions {
        allow_kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
        ..LoadOptions::default()
    }
}

fn check_allowing(kinds: &[&str], current: &str, proposed: &str) -> ate_configguard::Report {
    let options = allowing(kinds);
    ate_configguard::check(&ate_configguard::CheckInput {
        current: load_str(current, "current.yaml", &options).unwrap(),
        proposed: load_str(proposed, "proposed.yaml", &options).unwrap(),
        ..Default::default()
    })
    .unwrap()
}

const VOLCANO: &str = "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata:\n  name: train\n\
    spec:\n  tasks:\n    - name: ps\n      template:\n        spec:\n          containers:\n            \
    - name: ps\n              image: img\n              env:\n                - name: TOKEN\n                  \
    valueFrom: {secretKeyRef: {name: creds, key: token}}\n    - name: worker\n      template:\n        \
    spec:\n          containers:\n            - name: worker\n              image: img\n              \
    envFrom: [{configMapRef: {name: settings}}]\n";

#[test]
fn a_custom_resource_with_several_pod_templates_is_read_as_one_pod_each() {
    let m = load_str(VOLCANO, "test.yaml", &allowing(&["Job.batch.volcano.sh"])).unwrap();
    let names: Vec<&str> = m.workloads.iter().map(|w| w.id.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "train@spec.tasks[0].template",
            "train@spec.tasks[1].template"
        ]
    );
    let current = docs(&[
        VOLCANO,
        &secret("creds", &["token"]),
        &cm("settings", &["a"]),
    ]);
    let report = check_allowing(&["Job.batch.volcano.sh"], &current, &current);
    assert!(report.failures.is_empty(), "{report:?}");
    let proposed = docs(&[
        VOLCANO,
        &secret("creds", &["other"]),
        &cm("settings", &["a"]),
    ]);
    let report = check_allowing(&["Job.batch.volcano.sh"], &current, &proposed);
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("token".into()))]
    );
    assert!(
        report
            .failures
            .iter()
            .all(|f| f.workload.as_ref().unwrap().name == "train@spec.tasks[0].template")
    );
    // A PyTorchJob's Master and Worker replica specs, likewise.
    let pytorch = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: mnist\nspec:\n  \
        pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n          containers:\n            \
        - {name: pytorch, image: img}\n    Worker:\n      template:\n        spec:\n          containers:\n            \
        - {name: pytorch, image: img}\n";
    let m = load_str(pytorch, "test.yaml", &allowing(&["PyTorchJob"])).unwrap();
    assert_eq!(m.workloads.len(), 2);
}

#[test]
fn an_analysis_template_has_its_args_and_its_metric_jobs_read() {
    let template = "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate\nmetadata:\n  \
        name: success-rate\nspec:\n  args:\n    - name: api-token\n      valueFrom:\n        \
        secretKeyRef: {name: datadog, key: api-key}\n  metrics:\n    - name: job\n      provider:\n        \
        job:\n          spec:\n            template:\n              spec:\n                containers:\n                  \
        - name: check\n                    image: img\n                    envFrom: [{secretRef: {name: checker}}]\n                \
        restartPolicy: Never\n";
    let e = refused(template, &LoadOptions::default());
    assert!(e.contains("--allow-kind AnalysisTemplate"), "{e}");
    let current = docs(&[
        template,
        &secret("datadog", &["api-key"]),
        &secret("checker", &["x"]),
    ]);
    let report = check_allowing(&["AnalysisTemplate"], &current, &current);
    assert!(report.failures.is_empty(), "{report:?}");
    let proposed = docs(&[
        template,
        &secret("datadog", &["app-key"]),
        &secret("checker", &["x"]),
    ]);
    let report = check_allowing(&["AnalysisTemplate"], &current, &proposed);
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("api-key".into()))],
        "{report:?}"
    );
}

/// A live Secret (it has a uid), with `extra` metadata lines.
fn live_secret(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  uid: u-{name}\n  \
         resourceVersion: \"7\"\n{extra}data: {{k: eA==}}\n"
    )
}

fn reader(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  \
         annotations: {{meta.helm.sh/release-name: app}}\nspec:\n  template:\n    spec:\n      \
         containers:\n        - name: c\n          image: img\n          env:\n            \
         - name: K\n              valueFrom: {{secretKeyRef: {{name: {secret}, key: k}}}}\n"
    )
}

#[test]
fn a_prune_deletes_only_what_the_applier_owns() {
    let job_written = live_secret(
        "webhook-certs",
        "  managedFields:\n    - {manager: kubectl-create, operation: Update}\n",
    );
    let owned = live_secret(
        "token",
        "  ownerReferences:\n    - {apiVersion: v1, kind: ServiceAccount, name: sa, uid: x}\n",
    );
    let helm = live_secret("db", "  annotations: {meta.helm.sh/release-name: app}\n");
    let applied = live_secret(
        "api",
        "  annotations: {kubectl.kubernetes.io/last-applied-configuration: \"\"}\n",
    );
    // Argo CD's default tracking label.
    let argo = live_secret("argo", "  labels: {app.kubernetes.io/instance: shop}\n");
    let readers = [
        reader("a", "webhook-certs"),
        reader("b", "token"),
        reader("c", "db"),
        reader("d", "api"),
        reader("e", "argo"),
    ];
    let mut current: Vec<&str> = vec![&job_written, &owned, &helm, &applied, &argo];
    current.extend(readers.iter().map(String::as_str));
    let current = docs(&current);
    // The new release renders the Deployments and none of the Secrets.
    let proposed = docs(&readers.iter().map(String::as_str).collect::<Vec<_>>());
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    let mut pruned: Vec<String> = report
        .failures
        .iter()
        .map(|f| f.object.as_ref().unwrap().name.clone())
        .collect();
    pruned.sort();
    pruned.dedup();
    // Helm's, kubectl's and Argo CD's own Secrets go; the Job's and the
    // owned one stay.
    assert_eq!(pruned, ["api", "argo", "db"], "{report:?}");
}

#[test]
fn a_prune_selector_keeps_what_it_does_not_match() {
    let secret = |name: &str, label: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  labels: {{app: {label}}}\ndata: {{k: eA==}}\n"
        )
    };
    let (web, other) = (secret("web-db", "web"), secret("other-db", "other"));
    let current = docs(&[
        &web,
        &other,
        &reader("a", "web-db"),
        &reader("b", "other-db"),
    ]);
    let proposed = docs(&[&reader("a", "web-db"), &reader("b", "other-db")]);
    let options = LoadOptions {
        prune_selector: ate_configguard::text::parse_selector("app=web").unwrap(),
        ..LoadOptions::default()
    };
    let report = ate_configguard::check(&ate_configguard::CheckInput {
        current: load_str(&current, "c.yaml", &options).unwrap(),
        proposed: load_str(&proposed, "p.yaml", &options).unwrap(),
        deletion: Deletion::Prune,
        ..Default::default()
    })
    .unwrap();
    let names: std::collections::BTreeSet<&str> = report
        .failures
        .iter()
        .map(|f| f.object.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["web-db"],
        "{report:?}"
    );
    for bad in ["app!=web", "env in (a)", "=x"] {
        assert!(ate_configguard::text::parse_selector(bad).is_err(), "{bad}");
    }
}

#[test]
fn an_allowed_instance_that_names_nothing_contributes_nothing() {
    // `--allow-kind` is per kind: two ordinary Kafka clusters in one
    // namespace, one naming a metrics ConfigMap and one naming nothing,
    // made every invocation exit 2.
    let named = "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata:\n  name: a\nspec:\n  kafka:\n    metricsConfig:\n      type: jmxPrometheusExporter\n      valueFrom:\n        configMapKeyRef: {name: kafka-metrics, key: kafka-metrics-config.yml}\n";
    let plain = "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata:\n  name: b\nspec:\n  kafka:\n    replicas: 3\n";
    let options = allowing(&["Kafka"]);
    let m = load_str(&docs(&[named, plain]), "kafka.yaml", &options).unwrap();
    assert_eq!(m.workloads.len(), 1, "only the instance that names one");
    // Its reference is still checked.
    let current = docs(&[
        named,
        plain,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kafka-metrics\ndata:\n  kafka-metrics-config.yml: x\n",
    ]);
    let proposed = docs(&[
        named,
        plain,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kafka-metrics\ndata:\n  other: x\n",
    ]);
    let report = check_allowing(&["Kafka"], &current, &proposed);
    assert_eq!(
        codes(&report),
        vec![(
            "missing-key".into(),
            Some("kafka-metrics-config.yml".into())
        )],
        "{}",
        report.to_text()
    );
}

const KAFKA_USER: &str = "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaConnect\nmetadata:\n  name: connect\nspec:\n  tls:\n    trustedCertificates:\n      - {secretName: cluster-ca, certificate: ca.crt}\n  authentication:\n    type: scram-sha-512\n    username: connect\n    passwordSecret: {secretName: connect-user, password: password}\n";

fn secret_doc(name: &str, keys: &[&str]) -> String {
    let data: Vec<String> = keys.iter().map(|k| format!("  {k}: eA==")).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ndata:\n{}\n",
        data.join("\n")
    )
}

#[test]
fn a_secret_name_selector_reads_its_keys_not_the_secret_whole() {
    let current = docs(&[
        KAFKA_USER,
        &secret_doc("cluster-ca", &["ca.crt", "ca.p12"]),
        &secret_doc("connect-user", &["password", "sasl.jaas.config"]),
    ]);
    // A key nobody reads goes: no break (read whole, it was a failure).
    let proposed = docs(&[
        KAFKA_USER,
        &secret_doc("cluster-ca", &["ca.crt"]),
        &secret_doc("connect-user", &["password"]),
    ]);
    let report = check_allowing(&["KafkaConnect"], &current, &proposed);
    assert!(report.is_safe(), "{}", report.to_text());
    // The key it reads goes: a missing-key failure, which retiring the key
    // does not waive (it is read by name).
    let proposed = docs(&[
        KAFKA_USER,
        &secret_doc("cluster-ca", &["ca.crt", "ca.p12"]),
        &secret_doc("connect-user", &["sasl.jaas.config"]),
    ]);
    let options = allowing(&["KafkaConnect"]);
    let report = ate_configguard::check(&ate_configguard::CheckInput {
        current: load_str(&current, "current.yaml", &options).unwrap(),
        proposed: load_str(&proposed, "proposed.yaml", &options).unwrap(),
        retired: vec![
            ate_configguard::manifest::parse_retired_key("Secret/default/connect-user/password")
                .unwrap(),
        ],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("password".into()))],
        "{}",
        report.to_text()
    );
}

#[test]
fn ceph_csi_image_set_names_a_config_map() {
    let config = "apiVersion: csi.ceph.io/v1alpha1\nkind: OperatorConfig\nmetadata:\n  name: ceph-csi-operator-config\nspec:\n  driverSpecDefaults:\n    imageSet:\n      name: csi-images\n";
    let images =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csi-images\ndata:\n  plugin: x\n";
    let report = ate_configguard::check(&ate_configguard::CheckInput {
        current: load_str(
            &docs(&[config, images]),
            "current.yaml",
            &allowing(&["OperatorConfig"]),
        )
        .unwrap(),
        proposed: load_str(config, "proposed.yaml", &allowing(&["OperatorConfig"])).unwrap(),
        deletion: ate_configguard::Deletion::Prune,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{}",
        report.to_text()
    );
}

#[test]
fn an_operator_resources_finding_names_its_field_not_a_container() {
    let kafka = "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata:\n  name: a\nspec:\n  kafka:\n    metricsConfig:\n      type: jmxPrometheusExporter\n      valueFrom:\n        configMapKeyRef: {name: kafka-metrics, key: cfg.yml}\n    secrets: [tls]\n";
    let report = check_allowing(&["Kafka"], kafka, kafka);
    let sites: Vec<(Option<&str>, Option<&str>)> = report
        .failures
        .iter()
        .map(|f| (f.container.as_deref(), f.site.as_deref()))
        .collect();
    assert_eq!(
        sites,
        [
            (
                None,
                Some("spec.kafka.metricsConfig.valueFrom.configMapKeyRef")
            ),
            (None, Some("spec.kafka.secrets[0]"))
        ],
        "{}",
        report.to_text()
    );
}
