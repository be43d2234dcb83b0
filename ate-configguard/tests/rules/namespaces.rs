//! Namespaces: manifests without one, empty ones, and what prune may delete.

use super::*;

#[test]
fn manifests_without_a_namespace_must_meet_the_other_state_whichever_side_they_are() {
    let in_prod = |yaml: String| yaml.replacen("metadata:\n", "metadata:\n  namespace: prod\n", 1);
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\n";
    let root_ca = "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: kube-root-ca.crt, namespace: default }\ndata: { ca.crt: x }\n";
    let err = |current: &str, proposed: &str| {
        unplaced_namespace(&load(current), &load(proposed), "default")
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    // The current state is the render (an older chart's), the proposed one
    // is read from the cluster.
    let found = err(&cm("cfg", &["A"]), &in_prod(cm("cfg", &["A"])));
    assert!(
        found.contains("current state") && found.contains("--namespace prod"),
        "{found:?}"
    );
    // The other state holds only a ServiceAccount, in prod.
    let found = err(&in_prod(account.to_owned()), &cm("cfg", &["A"]));
    assert!(found.contains("--namespace prod"), "{found:?}");
    // A workload the other state holds only in prod, while that state
    // reaches `default` too (`kubectl get -A`).
    let plain = "      containers:\n        - name: app\n          image: app:2\n";
    let live = docs(&[&in_prod(deployment("web", plain)), root_ca]);
    let found = err(&live, &deployment("web", plain));
    assert!(
        found.contains("Deployment web is there, but the current state holds it only in prod"),
        "{found:?}"
    );
    // A render big enough to be loaded in parallel chunks (over 512
    // documents) counts every manifest without a namespace.
    let many: Vec<String> = (0..600).map(|i| cm(&format!("cfg-{i}"), &["A"])).collect();
    let many = load(&many.join("\n---\n"));
    assert_eq!(many.unplaced, 600);
    let found = unplaced_namespace(&load(&in_prod(cm("cfg-0", &["A"]))), &many, "default")
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(found.contains("--namespace prod"), "{found:?}");
    // Both in one namespace: they meet.
    assert!(
        unplaced_namespace(
            &load(&cm("cfg", &["A"])),
            &load(&cm("cfg", &["B"])),
            "default"
        )
        .is_none()
    );
}

#[test]
fn an_empty_namespace_is_left_out_as_kubectl_and_helm_take_it() {
    // `namespace: ""` (a chart's `{{ .Values.namespace | quote }}` left
    // unset) is placed by kubectl and Helm in the namespace they are given,
    // as a manifest without one is: an input error before, and no longer
    // read as a namespace of its own.
    let empty = |yaml: String| yaml.replacen("metadata:\n", "metadata:\n  namespace: \"\"\n", 1);
    let in_prod = |yaml: String| yaml.replacen("metadata:\n", "metadata:\n  namespace: prod\n", 1);
    let prod = LoadOptions {
        default_namespace: "prod".into(),
        ..LoadOptions::default()
    };
    let proposed = docs(&[
        &empty(cm("app-config", &["A"])),
        &empty(deployment("web", ENVFROM_APP)),
    ]);
    let loaded = load_str(&proposed, "rendered.yaml", &prod).unwrap();
    assert_eq!(loaded.unplaced, 2, "both count as placed by --namespace");
    assert_eq!(
        loaded.objects[0].id.to_string(),
        "ConfigMap/prod/app-config"
    );
    assert_eq!(loaded.workloads[0].id.namespace, "prod");
    // So they meet the live state in prod: the key a bulk load loses fails.
    let current = load(&docs(&[
        &in_prod(cm("app-config", &["A", "B"])),
        &in_prod(deployment("web", ENVFROM_APP)),
    ]));
    assert!(unplaced_namespace(&current, &loaded, "prod").is_none());
    // Manifests that state their namespace are placed, whatever is given.
    assert_eq!(current.unplaced, 0);
    assert!(unplaced_namespace(&current, &current, "default").is_none());
    let report = check(&CheckInput {
        current: current.clone(),
        proposed: loaded,
        inventory: None,
        deletion: Deletion::Listed,
        delete: Vec::new(),
        retired: Vec::new(),
    })
    .unwrap();
    // Both for the pods serving now and for those the rollout starts: one
    // finding that says so.
    let lost = ("bulk-key-removed".to_owned(), Some("B".to_owned()));
    assert_eq!(codes(&report), vec![lost], "{}", report.to_text());
    assert_eq!(report.failures[0].side, Some(Side::Both));
    // Read in the default namespace, they would miss it: unusable input.
    let unplaced = load(&proposed);
    assert_eq!(unplaced.objects[0].id.namespace, "default");
    assert!(unplaced_namespace(&current, &unplaced, "default").is_some());
}

#[test]
fn prune_deletes_only_in_the_namespaces_the_proposed_input_touches() {
    // `kubectl apply --prune` prunes the namespaces of what it applied: a
    // live state read with `-A` holds kube-system, which a deploy of one
    // app's namespace never deletes.
    let in_ns = |yaml: String, ns: &str| {
        yaml.replacen("metadata:\n", &format!("metadata:\n  namespace: {ns}\n"), 1)
    };
    let coredns = "      containers:\n        - name: coredns\n          image: coredns:1\n          volumeMounts: [ { name: cfg, mountPath: /etc/coredns } ]\n      volumes:\n        - name: cfg\n          configMap: { name: coredns }\n";
    let current = [
        in_ns(cm("coredns", &["Corefile"]), "kube-system"),
        in_ns(deployment("coredns", coredns), "kube-system"),
        in_ns(cm("app-config", &["A"]), "prod"),
        in_ns(deployment("web", ENVFROM_APP), "prod"),
    ]
    .join("\n---\n");
    let proposed = in_ns(cm("app-config", &["A"]), "prod");
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    assert!(report.is_safe(), "{}", report.to_text());
    // In a namespace it touches, an absent object is deleted.
    let proposed = in_ns(cm("other", &["B"]), "prod");
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    assert_eq!(codes(&report), vec![("missing-object".into(), None)]);
    assert_eq!(
        report.failures[0].object.as_ref().unwrap().to_string(),
        "ConfigMap/prod/app-config"
    );
}

#[test]
fn prune_leaves_what_helm_or_argo_cd_is_told_to_keep_and_hooks() {
    // `helm.sh/resource-policy: keep` and Argo CD's `Prune=false` (or
    // `Prune=confirm`) leave an object the new release or sync no longer
    // holds. Before, `--prune` counted it as deleted: a failure for every
    // workload still reading it, though it stays.
    let annotated = |annotations: &str| {
        cm("app-config", &["REDIS_DB_HOST"]).replacen(
            "metadata:\n",
            &format!("metadata:\n  annotations: {annotations}\n"),
            1,
        )
    };
    let proposed = cm("other", &["B"]);
    for annotations in [
        "{helm.sh/resource-policy: keep}",
        "{helm.sh/resource-policy: \" Keep \"}",
        "{argocd.argoproj.io/sync-options: Prune=false}",
        "{argocd.argoproj.io/sync-options: \"ServerSideApply=true, Prune=confirm\"}",
    ] {
        let current = docs(&[&annotated(annotations), &deployment("pusher", ENVFROM_APP)]);
        let report = run_with(&current, &proposed, Deletion::Prune, &[]);
        assert!(report.is_safe(), "{annotations}: {}", report.to_text());
        // Deleting it by name still deletes it.
        let report = run_with(
            &current,
            &proposed,
            Deletion::Listed,
            &["ConfigMap/default/app-config"],
        );
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), None)],
            "{annotations}"
        );
    }
    // A hook is not pruned either: neither Helm nor Argo CD counts one as
    // a resource of the release or application (gitops-engine skips hooks
    // when it plans prune tasks); only its delete policy removes it.
    for annotations in [
        "{helm.sh/hook: pre-install}",
        "{argocd.argoproj.io/hook: PreSync}",
    ] {
        let current = docs(&[&annotated(annotations), &deployment("pusher", ENVFROM_APP)]);
        let report = run_with(&current, &proposed, Deletion::Prune, &[]);
        assert!(report.is_safe(), "{annotations}: {}", report.to_text());
    }
    // Any other value prunes it, as before.
    for annotations in [
        "{helm.sh/resource-policy: delete}",
        "{argocd.argoproj.io/sync-options: \"Prune=true,Replace=true\"}",
        "{other.example/keep: \"true\"}",
    ] {
        let current = docs(&[&annotated(annotations), &deployment("pusher", ENVFROM_APP)]);
        let report = run_with(&current, &proposed, Deletion::Prune, &[]);
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), None)],
            "{annotations}"
        );
    }
    // A kept workload is not pruned: its findings do not say it is.
    let kept_job = deployment("pusher", ENVFROM_APP).replacen(
        "metadata:\n",
        "metadata:\n  annotations: {helm.sh/resource-policy: keep}\n",
        1,
    );
    let current = docs(&[&cm("app-config", &["REDIS_DB_HOST"]), &kept_job]);
    let report = run_with(&current, &cm("app-config", &[]), Deletion::Prune, &[]);
    assert_eq!(
        codes(&report),
        vec![("bulk-key-removed".into(), Some("REDIS_DB_HOST".into()))]
    );
    assert!(
        !report.failures[0].message.contains("prunes this workload"),
        "{}",
        report.to_text()
    );
}
