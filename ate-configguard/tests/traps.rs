//! Fail-closed traps in workloads and in the input's shape: each must be
//! an input error (exit 2), never a pass. (Traps in the ConfigMaps and
//! Secrets themselves: `config_object_traps.rs`.)

mod common;

use ate_configguard::{
    CheckInput, Deletion, LoadOptions, check, load_str, manifest::parse_object_id,
};
use common::*;

#[test]
fn unknown_field_under_env_is_an_input_error() {
    let c = "      containers:\n        - name: app\n          image: a\n          env:\n            - name: X\n              valueFrom:\n                vaultKeyRef: { name: v, key: k }\n";
    let err = load_err(&deployment("web", c));
    assert!(err.to_string().contains("vaultKeyRef"), "{err}");
}

#[test]
fn unknown_reference_like_field_anywhere_is_an_input_error() {
    let c = "      futureSecretRef: { name: s }\n      containers:\n        - name: app\n          image: a\n";
    assert!(
        load_err(&deployment("web", c))
            .to_string()
            .contains("futureSecretRef")
    );
    let c = "      volumes:\n        - name: v\n          newVolumeType: { anything: 1 }\n      containers:\n        - name: app\n          image: a\n";
    assert!(
        load_err(&deployment("web", c))
            .to_string()
            .contains("newVolumeType")
    );
}

#[test]
fn harmless_unknown_fields_are_tolerated() {
    let c = "      someFutureSchedulingHint: true\n      containers:\n        - name: app\n          image: a\n";
    assert!(load_str(&deployment("web", c), "t.yaml", &LoadOptions::default()).is_ok());
}

#[test]
fn empty_names_and_keys_are_input_errors() {
    let no_key = "      containers:\n        - name: app\n          image: a\n          env:\n            - name: X\n              valueFrom:\n                configMapKeyRef: { name: cfg }\n";
    assert!(
        load_err(&deployment("web", no_key))
            .to_string()
            .contains("key is empty")
    );
    let no_name = "      containers:\n        - name: app\n          image: a\n          envFrom:\n            - secretRef: {}\n";
    assert!(
        load_err(&deployment("web", no_name))
            .to_string()
            .contains("name is empty")
    );
    let nameless_cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\ndata: { A: b }\n";
    assert!(load_err(nameless_cm).to_string().contains("metadata.name"));
    // A ServiceAccount's pull secret, added to every pod that runs as it.
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata: { name: builder }\n\
                   imagePullSecrets: [ { name: \"\" } ]\n";
    let err = load_err(account).to_string();
    assert!(
        err.contains("ServiceAccount builder: an imagePullSecrets name is empty"),
        "{err}"
    );
}

#[test]
fn unknown_kind_with_a_pod_template_is_an_input_error_unless_allowed() {
    let rollout = "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: { name: r }\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          image: i\n          envFrom: [ { configMapRef: { name: x } } ]\n";
    let err = load_err(rollout);
    assert!(err.to_string().contains("--allow-kind Rollout"), "{err}");
    assert!(err.to_string().contains("carries a pod template"), "{err}");
    let opts = LoadOptions {
        allow_kinds: ["Rollout".to_string()].into(),
        ..Default::default()
    };
    let m = load_str(rollout, "t.yaml", &opts).unwrap();
    assert_eq!(m.workloads[0].references.len(), 1);
    let knative = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: { name: k }\nspec:\n  template:\n    spec:\n      containers: [ { image: i, envFrom: [ { secretRef: { name: tok } } ] } ]\n";
    let err = load_err(knative).to_string();
    assert!(
        err.contains("pass --allow-kind Service.serving.knative.dev (or Service, of any group)"),
        "{err}"
    );
    // The kind of one group only, or of any group.
    for allow in ["Service.serving.knative.dev", "Service"] {
        let opts = LoadOptions {
            allow_kinds: [allow.to_owned()].into(),
            ..Default::default()
        };
        let m = load_str(knative, "k.yaml", &opts).unwrap();
        assert_eq!(m.workloads.len(), 1, "{allow}");
        // Knative's containers may go unnamed: named by their place.
        let r = &m.workloads[0].references[0];
        assert_eq!(r.container.as_deref(), Some("containers[0]"), "{allow}");
        assert_eq!(r.name, "tok");
    }
    // Another group's kind is not allowed by the qualified name.
    let opts = LoadOptions {
        allow_kinds: ["Service.example.com".to_owned()].into(),
        ..Default::default()
    };
    let err = load_str(knative, "k.yaml", &opts).unwrap_err().to_string();
    assert!(
        err.contains("k.yaml") && err.contains("--allow-kind Service.serving.knative.dev"),
        "{err}"
    );
    // A kind without a pod template is simply not a workload.
    let svc =
        "apiVersion: v1\nkind: Service\nmetadata: { name: s }\nspec: { ports: [ { port: 80 } ] }\n";
    assert!(load(svc).workloads.is_empty());
}

#[test]
fn each_pod_template_of_an_allowed_kind_is_a_pod_of_its_own() {
    // A Kubeflow PyTorchJob runs its master and its workers from two
    // templates, each with its own service account and volumes.
    let job = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: { name: train }\nspec:\n  \
               pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n          \
               serviceAccountName: trainer\n          containers: [ { name: pytorch, image: i, \
               volumeMounts: [ { name: cfg, mountPath: /c } ] } ]\n          volumes: [ { name: cfg, \
               configMap: { name: master-cfg } } ]\n    Worker:\n      template:\n        spec:\n          \
               containers: [ { name: pytorch, image: i, volumeMounts: [ { name: cfg, mountPath: /c } ] } ]\n          \
               volumes: [ { name: cfg, configMap: { name: worker-cfg } } ]\n";
    let opts = LoadOptions {
        allow_kinds: ["PyTorchJob".to_owned()].into(),
        ..Default::default()
    };
    let m = load_str(job, "job.yaml", &opts).unwrap();
    let pods: Vec<(&str, Vec<&str>)> = m
        .workloads
        .iter()
        .map(|w| {
            let names = w.references.iter().map(|r| r.name.as_str()).collect();
            (w.service_account.as_str(), names)
        })
        .collect();
    assert_eq!(
        pods,
        [
            ("trainer", vec!["master-cfg"]),
            ("default", vec!["worker-cfg"])
        ]
    );
}

#[test]
fn unparsable_input_duplicates_and_missing_kind_are_input_errors() {
    for bad in [
        "kind: ConfigMap\napiVersion: v1\nmetadata: { name: a\n",
        "apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata: { name: a }\n",
        "apiVersion: v1\nmetadata: { name: a }\n",
        "kind: ConfigMap\nmetadata: { name: a }\n",
        "just a string\n",
        "- a\n- b\n",
        "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: { name: d }\nspec: { template: { spec: { containers: [] } } }\n",
    ] {
        assert!(
            load_str(bad, "t.yaml", &LoadOptions::default()).is_err(),
            "{bad}"
        );
    }
    assert!(load_str("{\"kind\": ", "t.json", &LoadOptions::default()).is_err());
}

#[test]
fn one_workload_twice_in_one_state_is_an_input_error() {
    // Two files that define one Deployment: `kubectl apply` applies the
    // last, and an Argo Rollout that runs its template took the first, so
    // the answer hung on the order of the files. Objects were refused
    // already.
    let reads = |key: &str| {
        deployment(
            "web",
            &format!(
                "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: K\n              valueFrom:\n                configMapKeyRef: {{name: cfg, key: {key}}}\n"
            ),
        )
    };
    let twice = docs(&[&cm("cfg", &["A", "B"]), &reads("A"), &reads("B")]);
    for (current, proposed, side) in [
        (twice.as_str(), NOTHING, "current state"),
        (NOTHING, twice.as_str(), "proposed state"),
    ] {
        let err = check(&CheckInput {
            current: load(current),
            proposed: load(proposed),
            inventory: None,
            deletion: Deletion::Listed,
            delete: Vec::new(),
            retired: Vec::new(),
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(side) && err.contains("Deployment/default/web appears twice"),
            "{err}"
        );
    }
}

#[test]
fn text_with_no_document_is_an_input_error_and_an_empty_list_is_not() {
    for empty in [
        "",
        "   \n",
        "# only a comment\n",
        "---\n",
        "---\n# x\n---\n...\n",
    ] {
        let err = load_err(empty).to_string();
        assert!(
            err.contains("test.yaml") && err.contains("no document"),
            "{empty:?}: {err}"
        );
    }
    for nothing in [
        NOTHING,
        "[]",
        "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
    ] {
        let m = load(nothing);
        assert!(
            m.objects.is_empty() && m.workloads.is_empty(),
            "{nothing:?}"
        );
    }
}

#[test]
fn a_typed_list_of_the_wrong_group_or_holding_another_kind_is_an_input_error() {
    let deployment = "metadata: { name: d }\n    spec: { template: { spec: { containers: [ { name: c, image: i } ] } } }";
    let wrong_group = format!("apiVersion: v1\nkind: DeploymentList\nitems:\n  - {deployment}\n");
    let err = load_err(&wrong_group).to_string();
    assert!(
        err.contains("DeploymentList with unsupported apiVersion v1 (expected apps/v1)"),
        "{err}"
    );
    let mixed = format!(
        "apiVersion: apps/v1\nkind: DeploymentList\nitems:\n  - {deployment}\n  - apiVersion: apps/v1\n    kind: StatefulSet\n    {deployment}\n"
    );
    let err = load_err(&mixed).to_string();
    assert!(
        err.contains("item 2")
            && err.contains("a DeploymentList item must be a Deployment, not StatefulSet"),
        "{err}"
    );
    // An item of the list's kind but another version is the item's own
    // error, as anywhere else.
    let old = format!(
        "apiVersion: apps/v1\nkind: DeploymentList\nitems:\n  - apiVersion: extensions/v1beta1\n    kind: Deployment\n    {deployment}\n"
    );
    let err = load_err(&old).to_string();
    assert!(
        err.contains("Deployment with unsupported apiVersion extensions/v1beta1"),
        "{err}"
    );
}

#[test]
fn an_unknown_kind_whose_containers_read_config_without_a_pod_template_is_not_passed_over() {
    // An Argo CronWorkflow runs `templates[].container`, not a pod
    // template; before, its reference was not seen and deleting the
    // Secret it reads passed as safe.
    let workflow = "apiVersion: argoproj.io/v1alpha1\nkind: CronWorkflow\nmetadata: { name: nightly }\nspec:\n  workflowSpec:\n    volumes:\n      - name: certs\n        secret: { secretName: tls }\n    templates:\n      - name: main\n        container:\n          image: backup:1\n          env:\n            - name: TOKEN\n              valueFrom: { secretKeyRef: { name: api, key: token } }\n      - name: report\n        script:\n          image: python:3\n          source: print(1)\n          envFrom: [ { configMapRef: { name: report-cfg } } ]\n";
    let err = load_err(workflow).to_string();
    assert!(
        err.contains(
            "unknown kind CronWorkflow (argoproj.io/v1alpha1) has containers that read a \
             ConfigMap or Secret (at spec.workflowSpec.templates[0].container.env[0].valueFrom); \
             pass --allow-kind CronWorkflow.argoproj.io"
        ),
        "{err}"
    );
    // A bulk load alone (`envFrom`) is seen too; an empty one reads nothing.
    let bulk_only = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: { name: w }\nspec:\n  templates:\n    - name: report\n      script:\n        image: python:3\n        envFrom: [ { configMapRef: { name: report-cfg } } ]\n";
    let err = load_err(bulk_only).to_string();
    assert!(
        err.contains("(at spec.templates[0].script.envFrom)"),
        "{err}"
    );
    let none = bulk_only.replace("[ { configMapRef: { name: report-cfg } } ]", "[]");
    assert!(load(&none).workloads.is_empty());
    // Allowed, its containers and volumes are read wherever they sit.
    let opts = LoadOptions {
        allow_kinds: ["CronWorkflow.argoproj.io".to_owned()].into(),
        ..Default::default()
    };
    let m = load_str(workflow, "wf.yaml", &opts).unwrap();
    assert_eq!(m.workloads.len(), 1);
    let mut refs: Vec<(String, Option<String>)> = m.workloads[0]
        .references
        .iter()
        .map(|r| (r.name.clone(), r.key.clone()))
        .collect();
    refs.sort();
    assert_eq!(
        refs,
        [
            ("api".to_owned(), Some("token".to_owned())),
            ("report-cfg".to_owned(), None),
            ("tls".to_owned(), None),
        ]
    );
    // `--allow-kind` allows a kind: an instance of it with no container
    // that names nothing contributes no references (it was an input
    // error, so two instances, one naming config and one not, failed every
    // run).
    let empty = "apiVersion: argoproj.io/v1alpha1\nkind: CronWorkflow\nmetadata: { name: e }\nspec: { schedule: x }\n";
    let m = load_str(empty, "e.yaml", &opts).unwrap();
    assert!(m.workloads.is_empty());
    // A kind that reads nothing through container environments is not a
    // workload (a cert-manager Certificate names the Secret it writes).
    let cert = "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: { name: c }\nspec: { secretName: web-tls, dnsNames: [ a.example ] }\n";
    assert!(load(cert).workloads.is_empty());
    // Nor is one whose `containers` field is no list (a count, a map): a
    // pod template's containers are a list.
    for containers in ["3", "{ max: 3 }"] {
        let pool = format!(
            "apiVersion: example.com/v1\nkind: Pool\nmetadata: {{ name: p }}\nspec: {{ containers: {containers} }}\n"
        );
        assert!(load(&pool).workloads.is_empty(), "{containers}");
    }
}

#[test]
fn a_custom_resource_named_like_a_kubernetes_kind_is_an_unknown_kind() {
    // Volcano's `Job` (`batch.volcano.sh`) carries pod templates under
    // `tasks`: it is not a `batch/v1` Job, and refusing it as "Job with
    // unsupported apiVersion" left no way to read it.
    let volcano = "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: { name: train }\nspec:\n  tasks:\n    - name: worker\n      template:\n        spec:\n          containers:\n            - name: w\n              image: i\n              envFrom: [ { secretRef: { name: tok } } ]\n";
    let err = load_err(volcano).to_string();
    assert!(
        err.contains("unknown kind Job (batch.volcano.sh/v1alpha1) carries a pod template; pass --allow-kind Job"),
        "{err}"
    );
    let options = ate_configguard::LoadOptions {
        allow_kinds: ["Job".to_owned()].into(),
        ..Default::default()
    };
    let m = ate_configguard::load_str(volcano, "v.yaml", &options).unwrap();
    let ids: Vec<String> = m.workloads.iter().map(|w| w.id.to_string()).collect();
    assert_eq!(ids, ["Job.batch.volcano.sh/default/train"]);
    assert_eq!(m.workloads[0].references.len(), 1);
    // An older version of Kubernetes' own group stays an input error.
    let old = "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: { name: c }\nspec: {}\n";
    let err = load_err(old).to_string();
    assert!(
        err.contains("CronJob with unsupported apiVersion batch/v1beta1"),
        "{err}"
    );
    let old = "apiVersion: extensions/v1beta1\nkind: DeploymentList\nitems: []\n";
    let err = load_err(old).to_string();
    assert!(
        err.contains("DeploymentList with unsupported apiVersion"),
        "{err}"
    );
}

#[test]
fn kustomize_sources_are_input_errors() {
    for kind in ["Kustomization", "Component"] {
        let api = if kind == "Component" {
            "v1alpha1"
        } else {
            "v1beta1"
        };
        let src = format!(
            "apiVersion: kustomize.config.k8s.io/{api}\nkind: {kind}\nresources: [a.yaml]\n"
        );
        let err = load_err(&src).to_string();
        assert!(
            err.contains(kind) && err.contains("kubectl kustomize"),
            "{err}"
        );
    }
    // A kustomization.yaml may leave out kind and apiVersion.
    let bare = "namespace: prod\nresources: [deploy.yaml]\nconfigMapGenerator:\n  - name: cfg\n    literals: [A=b]\n";
    let err = load_err(bare).to_string();
    assert!(
        err.contains("Kustomization") && err.contains("kubectl kustomize"),
        "{err}"
    );
    // Other documents without a kind are still just that, and say what to
    // give instead: a chart's Chart.yaml by name, other YAML found beside
    // the manifests (values.yaml, a CI workflow) in general.
    let err = load_err("metadata: { name: x }\n").to_string();
    assert!(
        err.contains("missing kind") && err.contains("give the manifests alone"),
        "{err}"
    );
    for chart in [
        "apiVersion: v2\nname: web\nversion: 0.1.0\nappVersion: \"1.0\"\n",
        "apiVersion: v1\nname: web\nversion: 1.2.3\n",
    ] {
        let err = load_err(chart).to_string();
        assert!(
            err.contains("missing kind")
                && err.contains("Chart.yaml")
                && err.contains("`helm template`"),
            "{err}"
        );
    }
    for not_a_chart in [
        "replicaCount: 1\nimage: {repository: nginx}\n",
        "apiVersion: v3\nname: web\nversion: 0.1.0\n",
        "name: ci\non: [push]\njobs: {}\n",
    ] {
        let err = load_err(not_a_chart).to_string();
        assert!(
            err.contains("give the manifests alone") && !err.contains("Chart.yaml"),
            "{err}"
        );
    }
}

#[test]
fn an_argo_rollout_that_runs_a_deployments_template_reads_what_it_reads() {
    // Argo Rollouts' `spec.workloadRef` runs the pod template of a
    // Deployment (scaled to 0 as the Rollout takes over) instead of a
    // template of its own. Before, such a Rollout was passed over, allowed
    // or not: with the Deployment out of the input (`kubectl get rollouts,
    // configmaps`), removing the key its pods read passed as safe; allowed,
    // it was unusable input, as a kind with no container.
    let rollout = "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: { name: web }\nspec:\n  replicas: 5\n  workloadRef: { apiVersion: apps/v1, kind: Deployment, name: web, scaleDown: progressively }\n  strategy: { canary: { steps: [ { setWeight: 20 } ] } }\n";
    let template = "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: web }\nspec:\n  replicas: 0\n  template:\n    spec:\n      serviceAccountName: web\n      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: DB_HOST\n              valueFrom: { configMapKeyRef: { name: cfg, key: DB_HOST } }\n";
    let err = load_err(rollout).to_string();
    assert!(
        err.contains(
            "unknown kind Rollout (argoproj.io/v1alpha1) runs the pod template of another \
             workload (spec.workloadRef); pass --allow-kind Rollout.argoproj.io"
        ),
        "{err}"
    );
    let opts = LoadOptions {
        allow_kinds: ["Rollout".to_owned()].into(),
        ..Default::default()
    };
    let load = |yaml: &str| load_str(yaml, "test.yaml", &opts).unwrap();
    let judge = |current: &str, proposed: &str| {
        check(&CheckInput {
            current: load(current),
            proposed: load(proposed),
            inventory: None,
            deletion: Deletion::Listed,
            delete: Vec::new(),
            retired: Vec::new(),
        })
    };
    let removed = cm("cfg", &["OTHER"]);
    // Allowed, with the Deployment in the input: the Rollout's pods read
    // DB_HOST, and the finding names the Rollout (as well as the
    // Deployment, which counts as serving at 0 replicas).
    let current = docs(&[&cm("cfg", &["DB_HOST"]), template, rollout]);
    let report = judge(&current, &removed).unwrap();
    let failing: Vec<String> = report
        .failures
        .iter()
        .map(|f| format!("{} {:?}", f.workload.as_ref().unwrap(), f.key))
        .collect();
    assert_eq!(
        failing,
        [
            "Deployment/default/web Some(\"DB_HOST\")",
            "Rollout/default/web Some(\"DB_HOST\")"
        ],
        "{}",
        report.to_text()
    );
    assert!(judge(&current, &cm("cfg", &["DB_HOST"])).unwrap().is_safe());
    // It runs the template it names, whatever other workloads come first.
    let first = deployment(
        "api",
        "      containers:\n        - name: api\n          image: api:1\n",
    );
    let report = judge(&docs(&[&first, &current]), &removed).unwrap();
    let failing: Vec<String> = report
        .failures
        .iter()
        .map(|f| f.workload.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(
        failing,
        ["Deployment/default/web", "Rollout/default/web"],
        "{}",
        report.to_text()
    );
    // The Rollout's pods run as the template's ServiceAccount: the pull
    // secret it adds is theirs too.
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata: { name: web }\nimagePullSecrets: [ { name: regcred } ]\n";
    let with_account = docs(&[
        &current,
        account,
        &secret("regcred", &[".dockerconfigjson"]),
    ]);
    let report = check(&CheckInput {
        current: load(&with_account),
        proposed: load(&cm("cfg", &["DB_HOST"])),
        inventory: None,
        deletion: Deletion::Listed,
        delete: vec![parse_object_id("Secret/default/regcred").unwrap()],
        retired: Vec::new(),
    })
    .unwrap();
    let failing: Vec<String> = report
        .failures
        .iter()
        .map(|f| {
            format!(
                "{} {}",
                f.workload.as_ref().unwrap(),
                f.object.as_ref().unwrap()
            )
        })
        .collect();
    assert_eq!(
        failing,
        [
            "Deployment/default/web Secret/default/regcred",
            "Rollout/default/web Secret/default/regcred"
        ],
        "{}",
        report.to_text()
    );
    // Without the Deployment, what its pods read is not known: unusable.
    let err = judge(&docs(&[&cm("cfg", &["DB_HOST"]), rollout]), &removed)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "Rollout/default/web runs the pod template of Deployment/default/web, and the \
             current input does not hold it"
        ),
        "{err}"
    );
    // A proposed Rollout may run the template of a Deployment the proposed
    // input leaves as it is.
    let proposed = docs(&[&removed, rollout]);
    let report = judge(&docs(&[&cm("cfg", &["DB_HOST"]), template]), &proposed).unwrap();
    assert!(
        report
            .failures
            .iter()
            .any(|f| f.workload.as_ref().unwrap().to_string() == "Rollout/default/web"),
        "{}",
        report.to_text()
    );
    // A workloadRef to anything but a Deployment, a ReplicaSet or a
    // PodTemplate is unusable input, as is one without a name.
    for bad in [
        "{ apiVersion: apps/v1, kind: StatefulSet, name: web }",
        "{ apiVersion: example.com/v1, kind: Deployment, name: web }",
        "{ apiVersion: apps/v1, kind: Deployment }",
    ] {
        let doc = rollout.replace(
            "{ apiVersion: apps/v1, kind: Deployment, name: web, scaleDown: progressively }",
            bad,
        );
        assert!(load_str(&doc, "t.yaml", &opts).is_err(), "{bad}");
    }
}

#[test]
fn a_map_key_or_annotations_of_the_wrong_shape_say_what_was_expected() {
    // A YAML complex key (`? [a, b]`) is no key kubectl could write.
    let complex =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  ? [a, b]\n  : v\n";
    let err = load_err(complex).to_string();
    assert!(
        err.contains("line 5 column 5: invalid type: sequence, expected a map key"),
        "{err}"
    );
    // Annotations that are not a map; the value itself is not shown.
    for (annotations, got) in [("5", "integer `…`"), ("[a]", "sequence")] {
        let doc = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, annotations: {annotations}}}\n"
        );
        let err = load_err(&doc).to_string();
        assert!(
            err.contains(&format!(
                "invalid type: {got}, expected a map of annotations"
            )),
            "{err}"
        );
    }
}

#[test]
fn a_render_cut_at_a_line_boundary_is_unusable_input() {
    // Cut right after `volumes:`: still valid YAML, but the mounts name
    // volumes that do not exist, which the API server refuses. Before,
    // the check read it and said safe.
    let whole = "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: other }\ndata: { a: b }\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: agent\nspec:\n  template:\n    spec:\n      containers:\n        - name: agent\n          image: agent:1\n          volumeMounts:\n            - { name: config, mountPath: /etc/agent }\n      volumes:\n        - name: config\n          configMap: { name: agent-config }\n";
    assert_eq!(load(whole).workloads.len(), 1);
    let cut = &whole[..whole.find("        - name: config").unwrap()];
    let err = load_err(cut).to_string();
    assert!(
        err.contains("DaemonSet agent")
            && err.contains("mounts volume \"config\"")
            && err.contains("test.yaml document 2 (line 6)"),
        "{err}"
    );
    // Two containers of one name (a list merged twice).
    let twice = whole.replace(
        "      volumes:",
        "        - name: agent\n          image: agent:2\n      volumes:",
    );
    let err = load_err(&twice).to_string();
    assert!(err.contains("two containers are named \"agent\""), "{err}");
    // A StatefulSet's containers may mount its claim templates.
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  template:\n    spec:\n      containers:\n        - name: db\n          image: db:1\n          volumeMounts:\n            - { name: data, mountPath: /data }\n  volumeClaimTemplates:\n    - metadata: { name: data }\n      spec: { accessModes: [ReadWriteOnce] }\n";
    assert_eq!(load(sts).workloads.len(), 1);
}
