//! Typed k8s-openapi objects (as a service reading them with `kube` holds
//! them) give the same names, and so the same check, as their manifests.

use std::collections::BTreeMap;

use ate_configguard::{
    CheckInput, LoadOptions, Manifests, check, load_str,
    manifest::{ConfigObject, HookPhase, Workload},
};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const MANIFESTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: app, namespace: shop }
data: { DB_HOST: db }
binaryData: { cert.der: AAAA }
immutable: true
---
apiVersion: v1
kind: Secret
metadata: { name: creds }
stringData: { PASSWORD: hunter2 }
---
apiVersion: v1
kind: Secret
metadata: { name: robot-token, namespace: shop, annotations: { kubernetes.io/service-account.name: robot } }
type: kubernetes.io/service-account-token
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop }
spec:
  selector: { matchLabels: { app: web } }
  template:
    metadata: { labels: { app: web } }
    spec:
      containers:
        - name: web
          image: web:1
          envFrom: [ { configMapRef: { name: app } } ]
          env:
            - name: TOKEN
              valueFrom: { secretKeyRef: { name: robot-token, key: token } }
"#;

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..Default::default()
    }
}

fn typed() -> Manifests {
    let cm = ConfigMap {
        metadata: meta("app", Some("shop")),
        data: Some(BTreeMap::from([("DB_HOST".into(), "db".into())])),
        binary_data: Some(BTreeMap::from([(
            "cert.der".into(),
            ByteString(vec![0, 0, 0]),
        )])),
        immutable: Some(true),
    };
    let creds = Secret {
        metadata: meta("creds", None),
        string_data: Some(BTreeMap::from([("PASSWORD".into(), "hunter2".into())])),
        ..Default::default()
    };
    let token = Secret {
        metadata: meta("robot-token", Some("shop")),
        type_: Some("kubernetes.io/service-account-token".into()),
        ..Default::default()
    };
    // The Deployment as the API (or `kube`) hands it over.
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web", "namespace": "shop" },
        "spec": {
            "selector": { "matchLabels": { "app": "web" } },
            "template": { "spec": { "containers": [ {
                "name": "web", "image": "web:1",
                "envFrom": [ { "configMapRef": { "name": "app" } } ],
                "env": [ { "name": "TOKEN", "valueFrom": { "secretKeyRef": { "name": "robot-token", "key": "token" } } } ]
            } ] } }
        }
    }))
    .unwrap();
    let spec = deployment.spec.template.spec.unwrap();
    Manifests {
        objects: vec![
            ConfigObject::from_config_map(&cm, "default").unwrap(),
            ConfigObject::from_secret(&creds, "default").unwrap(),
            ConfigObject::from_secret(&token, "default").unwrap(),
        ],
        workloads: vec![Workload::from_pod_spec("Deployment", "shop", "web", &spec).unwrap()],
        ..Default::default()
    }
}

#[test]
fn typed_objects_read_as_their_manifests_do() {
    let mut read = load_str(MANIFESTS, "m.yaml", &LoadOptions::default()).unwrap();
    let typed = typed();
    // A manifest's workload also says where it was read; a typed one was
    // read nowhere. Everything else is the same.
    assert!(
        read.workloads
            .iter()
            .all(|w| w.source.as_ref().is_some_and(|s| s.file == "m.yaml"))
    );
    for w in &mut read.workloads {
        w.source = None;
    }
    assert_eq!(typed.objects, read.objects);
    // The type too, which the API server will not change in place.
    assert_eq!(
        typed.objects[2].secret_type.as_deref(),
        Some("kubernetes.io/service-account-token")
    );
    assert_eq!(typed.workloads, read.workloads);
    // Names only: no value is kept.
    let debug = format!("{typed:?}");
    assert!(
        !debug.contains("hunter2") && !debug.contains("\"db\""),
        "{debug}"
    );
    // And the check sees the same transition.
    let mut proposed = typed.clone();
    proposed.objects[0].keys.clear();
    proposed.objects[0].immutable = false;
    let report = check(&CheckInput {
        current: typed,
        proposed,
        ..Default::default()
    })
    .unwrap();
    assert!(!report.is_safe());
}

#[test]
fn a_typed_object_without_a_name_is_an_input_error() {
    let nameless = ConfigMap::default();
    let err = ConfigObject::from_config_map(&nameless, "default").unwrap_err();
    assert!(err.to_string().contains("metadata.name"), "{err}");
    let spec = k8s_openapi::api::core::v1::PodSpec {
        containers: vec![
            serde_json::from_value(serde_json::json!({
                "name": "c", "envFrom": [ { "secretRef": {} } ]
            }))
            .unwrap(),
        ],
        ..Default::default()
    };
    let err = Workload::from_pod_spec("Deployment", "shop", "web", &spec).unwrap_err();
    assert!(err.to_string().contains("Deployment/shop/web"), "{err}");
}

#[test]
fn a_typed_config_object_reads_its_hook_annotations_as_a_manifest_does() {
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: migrate-config\n  \
        annotations: {helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '-5', \
        helm.sh/hook-delete-policy: hook-succeeded}\ndata: {A: a}\n";
    let read = load_str(manifest, "m.yaml", &LoadOptions::default()).unwrap();
    let mut metadata = meta("migrate-config", None);
    metadata.annotations = Some(BTreeMap::from([
        ("helm.sh/hook".into(), "pre-upgrade".into()),
        ("helm.sh/hook-weight".into(), "-5".into()),
        ("helm.sh/hook-delete-policy".into(), "hook-succeeded".into()),
    ]));
    let cm = ConfigMap {
        metadata,
        data: Some(BTreeMap::from([("A".into(), "a".into())])),
        ..Default::default()
    };
    let typed = ConfigObject::from_config_map(&cm, "default").unwrap();
    assert_eq!(typed, read.objects[0]);
    let hook = typed.hook.as_ref().unwrap();
    assert_eq!(hook.weight, -5);
    assert_eq!(hook.phase, HookPhase::BeforeChange);
    assert_eq!(
        hook.deleted_after.as_deref(),
        Some("helm.sh/hook-delete-policy=hook-succeeded")
    );
}

#[test]
fn a_typed_service_account_reads_as_its_manifest_does() {
    use k8s_openapi::api::core::v1::{LocalObjectReference, ServiceAccount as Account};
    let manifests = [
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n  namespace: shop\n  \
         annotations: {helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '-5'}\n\
         imagePullSecrets: [{name: regcred}, {name: mirror}]\n",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web\n  \
         annotations: {argocd.argoproj.io/sync-wave: '2'}\n",
    ];
    let mut app = Account {
        metadata: meta("app", Some("shop")),
        image_pull_secrets: Some(vec![
            LocalObjectReference {
                name: "regcred".into(),
            },
            LocalObjectReference {
                name: "mirror".into(),
            },
        ]),
        ..Default::default()
    };
    app.metadata.annotations = Some(BTreeMap::from([
        ("helm.sh/hook".into(), "pre-upgrade".into()),
        ("helm.sh/hook-weight".into(), "-5".into()),
    ]));
    let mut web = Account {
        metadata: meta("web", None),
        ..Default::default()
    };
    web.metadata.annotations = Some(BTreeMap::from([(
        "argocd.argoproj.io/sync-wave".into(),
        "2".into(),
    )]));
    for (manifest, typed) in manifests.iter().zip([&app, &web]) {
        let read = load_str(manifest, "m.yaml", &LoadOptions::default()).unwrap();
        let typed =
            ate_configguard::manifest::ServiceAccount::from_service_account(typed, "default")
                .unwrap();
        assert_eq!(typed, read.service_accounts[0]);
    }
    let app =
        ate_configguard::manifest::ServiceAccount::from_service_account(&app, "default").unwrap();
    assert_eq!(app.namespace, "shop");
    assert_eq!(app.image_pull_secrets, ["regcred", "mirror"]);
    assert_eq!(
        app.hook.as_ref().map(|h| (h.phase, h.weight)),
        Some((HookPhase::BeforeChange, -5))
    );
    let web =
        ate_configguard::manifest::ServiceAccount::from_service_account(&web, "shop").unwrap();
    assert_eq!(
        (web.namespace.as_str(), web.sync_wave, web.hook),
        ("shop", Some(2), None)
    );

    // No name, a pull secret without one, a namespace the API server
    // refuses: input errors naming what is wrong.
    let err = ate_configguard::manifest::ServiceAccount::from_service_account(
        &Account::default(),
        "default",
    )
    .unwrap_err();
    assert!(err.to_string().contains("metadata.name"), "{err}");
    let nameless_secret = Account {
        metadata: meta("app", None),
        image_pull_secrets: Some(vec![LocalObjectReference::default()]),
        ..Default::default()
    };
    let err = ate_configguard::manifest::ServiceAccount::from_service_account(
        &nameless_secret,
        "default",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("imagePullSecrets name is empty"),
        "{err}"
    );
    let err = ate_configguard::manifest::ServiceAccount::from_service_account(
        &Account {
            metadata: meta("app", Some("Not_A_Namespace")),
            ..Default::default()
        },
        "default",
    )
    .unwrap_err();
    assert!(err.to_string().contains("Not_A_Namespace"), "{err}");
}

#[test]
fn a_typed_object_given_twice_in_one_state_is_an_input_error_naming_it() {
    // Which of the two key lists would count is not known.
    let cm = |keys: &[&str]| {
        ConfigObject::from_config_map(
            &ConfigMap {
                metadata: meta("app", Some("shop")),
                data: Some(
                    keys.iter()
                        .map(|k| (k.to_string(), String::new()))
                        .collect(),
                ),
                ..Default::default()
            },
            "default",
        )
        .unwrap()
    };
    let twice = Manifests {
        objects: vec![cm(&["A", "B"]), cm(&["A"])],
        ..Default::default()
    };
    for (current, proposed, side) in [
        (twice.clone(), Manifests::default(), "current state"),
        (Manifests::default(), twice, "proposed state"),
    ] {
        let err = check(&CheckInput {
            current,
            proposed,
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            format!("{side}: ConfigMap/shop/app appears twice"),
            "one the input itself gives twice names no maker"
        );
    }
}

#[test]
fn a_workload_read_back_without_its_service_account_runs_as_default() {
    // As Kubernetes applies it: a pod spec without serviceAccountName
    // runs as the namespace's `default` account.
    let manifests = load_str(MANIFESTS, "m.yaml", &LoadOptions::default()).unwrap();
    let web = &manifests.workloads[0];
    assert_eq!(web.service_account, "default");
    let mut json = serde_json::to_value(web).unwrap();
    assert_eq!(json["service_account"], "default");
    json.as_object_mut().unwrap().remove("service_account");
    let back: Workload = serde_json::from_value(json).unwrap();
    assert_eq!(&back, web);
}
