//! Helm hooks and Argo CD waves: what each hook and workload sees when it runs.

use super::*;

/// A Job reading `cfg`'s key `key`, with `annotations` (a flow map).
fn hook_job(name: &str, key: &str, optional: bool, annotations: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations: {annotations}\n\
         spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        \
         - name: migrate\n          image: app:2\n          env:\n            - name: {key}\n              \
         valueFrom:\n                configMapKeyRef: {{name: cfg, key: {key}, optional: {optional}}}\n"
    )
}

/// ConfigMap `name` with `keys`, and `annotations` (a flow map).
fn hook_cm(name: &str, keys: &[&str], annotations: &str) -> String {
    cm(name, keys).replace(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n  annotations: {annotations}\n"),
    )
}

#[test]
fn a_hook_that_runs_before_the_change_sees_the_state_before_it() {
    const PRE: &str = "{helm.sh/hook: 'pre-install,pre-upgrade'}";
    let current = cm("cfg", &["DB_HOST"]);
    // The chart adds MIGRATIONS to cfg and a pre-upgrade Job that reads it:
    // the Job runs before cfg is updated, so it cannot start.
    let adds = |job: &str| docs(&[&cm("cfg", &["DB_HOST", "MIGRATIONS"]), job]);
    let report = run(
        &current,
        &adds(&hook_job("migrate", "MIGRATIONS", false, PRE)),
    );
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), Some("MIGRATIONS".into()))]
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains("helm.sh/hook=pre-install,pre-upgrade")
            && message.contains("the key MIGRATIONS comes only with the change"),
        "{message}"
    );
    // A key the state before the change holds is there for it.
    assert!(run(&current, &adds(&hook_job("migrate", "DB_HOST", false, PRE))).is_safe());
    // Optional: reported, not a failure.
    let optional = run(
        &current,
        &adds(&hook_job("migrate", "MIGRATIONS", true, PRE)),
    );
    assert!(optional.is_safe());
    assert_eq!(optional.warnings[0].code, "applied-after-hook");
    // The same Job after the change (post-upgrade) finds the key.
    let post = "{helm.sh/hook: post-upgrade}";
    assert!(
        run(
            &current,
            &adds(&hook_job("migrate", "MIGRATIONS", false, post))
        )
        .is_safe()
    );
    // A key the change does not bring at all is missing, as for any workload.
    let missing = run(&current, &hook_job("migrate", "NOWHERE", false, PRE));
    assert_eq!(
        codes(&missing),
        vec![("missing-key".into(), Some("NOWHERE".into()))]
    );
}

#[test]
fn a_config_hook_counts_for_a_workload_hook_only_if_it_is_created_first() {
    let current = NOTHING;
    let job = |annotations| hook_job("migrate", "MIGRATIONS", false, annotations);
    let with_cm = |cm_name: &str, cm_annotations: &str, job: String| {
        let job = job.replace("name: cfg,", &format!("name: {cm_name},"));
        docs(&[&hook_cm(cm_name, &["MIGRATIONS"], cm_annotations), &job])
    };
    let safe = |proposed: String| run(current, &proposed).is_safe();
    // Helm: lower weight first.
    assert!(safe(with_cm(
        "cfg",
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '-1'}",
        job("{helm.sh/hook: pre-upgrade}")
    )));
    assert!(!safe(with_cm(
        "cfg",
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '5'}",
        job("{helm.sh/hook: pre-upgrade}")
    )));
    // Helm, one weight: by name alone. "migrate" runs before
    // "migrate-config", after "a-config".
    let same = "{helm.sh/hook: pre-upgrade}";
    assert!(!safe(with_cm("migrate-config", same, job(same))));
    assert!(safe(with_cm("a-config", same, job(same))));
    // One name (a chart's `{{ .Release.Name }}-migrate` for both): Helm
    // sorts a phase's hooks by kind first, then stably by weight and name,
    // so the ConfigMap is created first. This failed before.
    assert!(safe(with_cm("migrate", same, job(same))));
    // A ConfigMap that is no hook is applied after every pre-upgrade hook.
    assert!(!safe(with_cm("a-config", "{}", job(same))));
    // Argo CD: by wave, and a wave's ConfigMaps before its workloads.
    let presync = "{argocd.argoproj.io/hook: PreSync}";
    assert!(safe(with_cm("migrate-config", presync, job(presync))));
    assert!(!safe(with_cm(
        "a-config",
        "{argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/sync-wave: '2'}",
        job(presync)
    )));
    // One of the two ordered by Helm (either tool may run them): by name,
    // the stricter order.
    assert!(!safe(with_cm("migrate-config", same, job(presync))));
    assert!(!safe(with_cm("migrate-config", presync, job(same))));
    assert!(safe(with_cm("a-config", same, job(presync))));
}

#[test]
fn a_hook_weight_that_is_not_a_whole_number_is_unusable_input() {
    let job = hook_job(
        "migrate",
        "K",
        false,
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: 'first'}",
    );
    let err = load_err(&job).to_string();
    assert!(
        err.contains("annotation helm.sh/hook-weight \"first\" is not a whole number"),
        "{err}"
    );
}

#[test]
fn a_workload_synced_in_an_earlier_wave_than_its_config_sees_the_config_as_it_was() {
    const NEW_KEY: &str = "      containers:\n        - name: app\n          image: app:2\n          env:\n            - name: NEW\n              valueFrom:\n                configMapKeyRef:\n                  name: cfg\n                  key: NEW\n";
    let wave = |doc: String, name: &str, wave: i64| {
        doc.replace(
            &format!("  name: {name}\n"),
            &format!("  name: {name}\n  annotations: {{argocd.argoproj.io/sync-wave: '{wave}'}}\n"),
        )
    };
    let current = cm("cfg", &["DB_HOST"]);
    let cfg = |w| wave(cm("cfg", &["DB_HOST", "NEW"]), "cfg", w);
    let web = |w, containers| wave(deployment("web", containers), "web", w);
    // The Deployment (wave 0) rolls out before cfg gains NEW (wave 1).
    let report = run(&current, &docs(&[&cfg(1), &web(0, NEW_KEY)]));
    assert_eq!(
        codes(&report),
        vec![("later-sync-wave".into(), Some("NEW".into()))]
    );
    assert!(
        report.failures[0].message.contains(
            "is synced in wave 0, and the key NEW comes only with the ConfigMap's change in wave 1"
        ),
        "{}",
        report.failures[0].message
    );
    // One wave (ConfigMaps first), or the ConfigMap earlier: safe.
    assert!(run(&current, &docs(&[&cfg(1), &web(1, NEW_KEY)])).is_safe());
    assert!(run(&current, &docs(&[&cfg(-1), &web(0, NEW_KEY)])).is_safe());
    assert!(
        run(
            &current,
            &docs(&[&cm("cfg", &["DB_HOST", "NEW"]), &deployment("web", NEW_KEY)])
        )
        .is_safe()
    );
    // A ConfigMap the change creates in a later wave.
    let created = run(NOTHING, &docs(&[&cfg(1), &web(0, NEW_KEY)]));
    assert!(
        created.failures[0]
            .message
            .contains("is synced in wave 0, and the ConfigMap is created only in wave 1"),
        "{}",
        created.failures[0].message
    );
    // A key the ConfigMap holds already is there in any wave.
    assert!(run(&current, &docs(&[&cfg(1), &web(0, KEYREF)])).is_safe());
    // A wave that is not a whole number is unusable input.
    let err = load_err(&cfg(1).replace("'1'", "'later'")).to_string();
    assert!(
        err.contains("argocd.argoproj.io/sync-wave \"later\" is not a whole number"),
        "{err}"
    );
}

#[test]
fn a_config_hook_deleted_once_its_hooks_succeed_is_gone_after_the_change() {
    // A chart makes its config a pre-install hook (so that its migration
    // Job finds it) and lets Helm delete it once the hooks succeed: the
    // Deployment that reads it then never starts. This passed before.
    const DELETED: &str = "{helm.sh/hook: 'pre-install,pre-upgrade', helm.sh/hook-weight: '-1', \
         helm.sh/hook-delete-policy: 'before-hook-creation,hook-succeeded'}";
    let cfg = |annotations| hook_cm("cfg", &["DB_HOST"], annotations);
    let report = run(NOTHING, &docs(&[&cfg(DELETED), &deployment("web", KEYREF)]));
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains(
            "only as a hook deleted once its hooks succeed (helm.sh/hook-delete-policy=\
             before-hook-creation,hook-succeeded): it is not there after the change"
        ),
        "{message}"
    );
    // Kept (Helm's default policy, before-hook-creation): there after.
    let kept = "{helm.sh/hook: 'pre-install,pre-upgrade', helm.sh/hook-weight: '-1'}";
    assert!(run(NOTHING, &docs(&[&cfg(kept), &deployment("web", KEYREF)])).is_safe());
    // While the hooks of its phase run, it is there: a pre-upgrade Job
    // after it reads it; a post-upgrade one runs once it is gone.
    let job = |annotations| hook_job("migrate", "DB_HOST", false, annotations);
    let pre = job("{helm.sh/hook: pre-upgrade}");
    assert!(run(NOTHING, &docs(&[&cfg(DELETED), &pre])).is_safe());
    let post = job("{helm.sh/hook: post-upgrade}");
    assert_eq!(
        codes(&run(NOTHING, &docs(&[&cfg(DELETED), &post]))),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
    // A post-upgrade ConfigMap deleted after the post-upgrade hooks is
    // there for a post-upgrade Job created after it.
    let post_cm = "{helm.sh/hook: post-upgrade, helm.sh/hook-weight: '-1', \
         helm.sh/hook-delete-policy: hook-succeeded}";
    assert!(run(NOTHING, &docs(&[&cfg(post_cm), &post])).is_safe());
    // A serving Deployment reading a ConfigMap the change turns into such a
    // hook loses it (the release no longer applies it).
    let live = docs(&[&cm("cfg", &["DB_HOST"]), &deployment("web", KEYREF)]);
    let report = run(&live, &cfg(DELETED));
    assert_eq!(report.failures.len(), 1, "{}", report.to_text());
    assert_eq!(report.failures[0].code, "missing-object");
    // Argo CD reads its own policy, and Helm's.
    let argo =
        "{argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}";
    let report = run(NOTHING, &docs(&[&cfg(argo), &deployment("web", KEYREF)]));
    assert!(
        report.failures[0]
            .message
            .contains("(argocd.argoproj.io/hook-delete-policy=HookSucceeded)"),
        "{}",
        report.to_text()
    );
    // A live hook the change does not name stays as it is.
    let live_hook = docs(&[&cfg(DELETED), &deployment("web", KEYREF)]);
    assert!(run(&live_hook, NOTHING).is_safe());
}

#[test]
fn a_config_hook_that_no_install_upgrade_or_sync_creates_is_not_there() {
    let web = deployment("web", KEYREF);
    // Each with the annotation the message names.
    for (annotations, named) in [
        ("{helm.sh/hook: test}", "helm.sh/hook=test"),
        (
            "{helm.sh/hook: 'pre-delete,pre-rollback'}",
            "helm.sh/hook=pre-delete,pre-rollback",
        ),
        // A type Helm does not know: Helm skips the resource.
        (
            "{helm.sh/hook: 'pre-install,crd-install'}",
            "helm.sh/hook=pre-install,crd-install",
        ),
        (
            "{argocd.argoproj.io/hook: Skip}",
            "argocd.argoproj.io/hook=Skip",
        ),
        (
            "{argocd.argoproj.io/hook: PostDelete}",
            "argocd.argoproj.io/hook=PostDelete",
        ),
        (
            "{argocd.argoproj.io/hook: SyncFail}",
            "argocd.argoproj.io/hook=SyncFail",
        ),
        // Argo CD goes by Helm's types where its own names none it knows;
        // neither runs here, so Argo CD's is named.
        (
            "{argocd.argoproj.io/hook: Later, helm.sh/hook: test}",
            "argocd.argoproj.io/hook=Later",
        ),
    ] {
        let cfg = hook_cm("cfg", &["DB_HOST"], annotations);
        let report = run(NOTHING, &docs(&[&cfg, &web]));
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), Some("DB_HOST".into()))],
            "{annotations}"
        );
        assert!(
            report.failures[0].message.contains(&format!(
                "only as a hook that no install, upgrade or sync creates ({named})"
            )),
            "{}",
            report.to_text()
        );
    }
    // Helm reads its types in any case; Argo CD maps them to its phases.
    for annotations in [
        "{helm.sh/hook: Pre-Install}",
        "{argocd.argoproj.io/hook: Later, helm.sh/hook: pre-install}",
        "{argocd.argoproj.io/hook: Sync}",
    ] {
        let cfg = hook_cm("cfg", &["DB_HOST"], annotations);
        let report = run(NOTHING, &docs(&[&cfg, &web]));
        assert!(report.is_safe(), "{annotations}: {}", report.to_text());
    }
    // A test Pod reads a test hook created before it.
    let test_cm = hook_cm(
        "cfg",
        &["DB_HOST"],
        "{helm.sh/hook: test, helm.sh/hook-weight: '-1'}",
    );
    let test_job = hook_job("smoke", "DB_HOST", false, "{helm.sh/hook: test}");
    assert!(run(NOTHING, &docs(&[&test_cm, &test_job])).is_safe());
}

#[test]
fn a_workload_reading_what_only_a_post_upgrade_hook_brings_cannot_start() {
    // Argo CD (and `helm --wait`) waits for the Deployment to be ready
    // before it runs post hooks; its new pods wait for NEW. This passed.
    const NEW_KEY: &str = "      containers:\n        - name: app\n          image: app:2\n          env:\n            - name: NEW\n              valueFrom:\n                configMapKeyRef: {name: cfg, key: NEW}\n";
    let current = cm("cfg", &["DB_HOST"]);
    for (annotations, named) in [
        ("{helm.sh/hook: post-upgrade}", "helm.sh/hook=post-upgrade"),
        (
            "{argocd.argoproj.io/hook: PostSync}",
            "argocd.argoproj.io/hook=PostSync",
        ),
        // Argo CD's annotation names no type it knows: it goes by Helm's,
        // which is named.
        (
            "{argocd.argoproj.io/hook: Later, helm.sh/hook: post-upgrade}",
            "helm.sh/hook=post-upgrade",
        ),
    ] {
        let cfg = hook_cm("cfg", &["DB_HOST", "NEW"], annotations);
        let report = run(&current, &docs(&[&cfg, &deployment("web", NEW_KEY)]));
        assert_eq!(
            codes(&report),
            vec![("created-by-post-hook".into(), Some("NEW".into()))]
        );
        let message = &report.failures[0].message;
        assert!(
            message.contains(&format!(
                "the key NEW comes only with a hook that runs after the change is applied ({named})"
            )),
            "{message}"
        );
        // What the ConfigMap holds already is there for it.
        assert!(run(&current, &docs(&[&cfg, &deployment("web", KEYREF)])).is_safe());
        // A post-upgrade Job created after it reads it.
        let job = hook_job("migrate", "NEW", false, annotations);
        assert!(run(&current, &docs(&[&cfg, &job])).is_safe());
    }
    // A ConfigMap the change creates only as a post hook.
    let cfg = hook_cm("cfg", &["DB_HOST"], "{helm.sh/hook: post-install}");
    let report = run(NOTHING, &docs(&[&cfg, &deployment("web", KEYREF)]));
    assert!(
        report.failures[0]
            .message
            .starts_with("the ConfigMap comes only with a hook"),
        "{}",
        report.to_text()
    );
    // A post-upgrade Job before the ConfigMap of its phase.
    let late = hook_cm(
        "cfg",
        &["DB_HOST", "NEW"],
        "{helm.sh/hook: post-upgrade, helm.sh/hook-weight: '3'}",
    );
    let job = hook_job("migrate", "NEW", false, "{helm.sh/hook: post-upgrade}");
    let report = run(&current, &docs(&[&late, &job]));
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), Some("NEW".into()))]
    );
    assert!(
        report.failures[0]
            .message
            .contains("comes only with a hook of its phase created after it"),
        "{}",
        report.to_text()
    );
}

#[test]
fn hooks_read_what_is_there_when_their_phase_runs() {
    let codes_of = |current: &str, proposed: &str| codes(&run(current, proposed));
    let wave_1 = "{argocd.argoproj.io/sync-wave: '1'}";

    // An Argo CD Sync hook runs in its wave, as the other resources do:
    // in wave 0 it cannot read what the ConfigMap brings in wave 1.
    let current = cm("cfg", &["DB_HOST"]);
    let cfg = hook_cm("cfg", &["DB_HOST", "NEW"], wave_1);
    let sync_hook = hook_job("migrate", "NEW", false, "{argocd.argoproj.io/hook: Sync}");
    assert_eq!(
        codes_of(&current, &docs(&[&cfg, &sync_hook])),
        vec![("later-sync-wave".into(), Some("NEW".into()))]
    );
    // In wave 2 it does.
    let in_wave_2 = hook_job(
        "migrate",
        "NEW",
        false,
        "{argocd.argoproj.io/hook: Sync, argocd.argoproj.io/sync-wave: '2'}",
    );
    let report = run(&current, &docs(&[&cfg, &in_wave_2]));
    assert!(report.is_safe(), "{}", report.to_text());

    // A Job that finished starts no pod: it waits for no wave.
    let job = hook_job("migrate", "NEW", false, "{}");
    assert_eq!(
        codes_of(&current, &docs(&[&cfg, &job])),
        vec![("later-sync-wave".into(), Some("NEW".into()))]
    );
    let finished =
        format!("{job}status:\n  conditions:\n    - {{type: Complete, status: 'True'}}\n");
    let report = run(&current, &docs(&[&cfg, &finished]));
    assert!(report.is_safe(), "{}", report.to_text());

    // A post-upgrade hook runs after the change: a key the change removes
    // is gone for it, and so is one a bulk load of its loses.
    let current = cm("cfg", &["OLD", "DB_HOST"]);
    let post = "{helm.sh/hook: post-upgrade}";
    let proposed = docs(&[
        &cm("cfg", &["DB_HOST"]),
        &hook_job("cleanup", "OLD", false, post),
    ]);
    assert_eq!(
        codes_of(&current, &proposed),
        vec![("missing-key".into(), Some("OLD".into()))]
    );
    let bulk = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: cleanup\n  annotations: {post}\n\
         spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        \
         - name: cleanup\n          image: app:2\n          envFrom: [{{configMapRef: {{name: cfg}}}}]\n"
    );
    assert_eq!(
        codes_of(&current, &docs(&[&cm("cfg", &["DB_HOST"]), &bulk])),
        vec![("bulk-key-removed".into(), Some("OLD".into()))]
    );
    // ... while a pre-upgrade one still sees the ConfigMap as it was.
    let pre_bulk = bulk.replace("post-upgrade", "pre-upgrade");
    let report = run(&current, &docs(&[&cm("cfg", &["DB_HOST"]), &pre_bulk]));
    assert!(report.is_safe(), "{}", report.to_text());

    // A pre-upgrade hook reading a ConfigMap that only a later hook of its
    // phase creates (and deletes once the hooks succeed): too late.
    let later = hook_cm(
        "cfg",
        &["K"],
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '5', \
         helm.sh/hook-delete-policy: hook-succeeded}",
    );
    let report = run(
        NOTHING,
        &docs(&[
            &later,
            &hook_job("migrate", "K", false, "{helm.sh/hook: pre-upgrade}"),
        ]),
    );
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), Some("K".into()))]
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains("and the ConfigMap comes only with the change"),
        "{message}"
    );
}

/// ServiceAccount `app` with `annotations` (a flow map's inside), whose
/// one pull secret is `secret`.
fn account(secret: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n  annotations: {{{annotations}}}\nimagePullSecrets: [ {{name: {secret}}} ]\n"
    )
}

/// A pull secret the kubelet reads, with `annotations`.
fn pull_secret(name: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\ntype: kubernetes.io/dockerconfigjson\ndata: {{.dockerconfigjson: e30=}}\n"
    )
}

/// Job `migrate`, a Helm `hook`, running as account `app`.
fn app_job(hook: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations: {{helm.sh/hook: {hook}}}\nspec:\n  template:\n    spec:\n      serviceAccountName: app\n      restartPolicy: Never\n      containers:\n        - name: migrate\n          image: registry.example/app:2\n"
    )
}

#[test]
fn a_hook_that_runs_before_the_change_runs_as_its_account_as_it_is_now() {
    // A pre-upgrade Job runs before the change updates its ServiceAccount:
    // its pod gets the pull secrets the account has now. Rotating the
    // account's pull secret (oldcred kept, newcred added with the change)
    // is then safe for it; judged by the updated account, it failed, as
    // newcred is not there yet.
    let current = docs(&[&account("oldcred", ""), &pull_secret("oldcred", "")]);
    let rotated = |hook: &str| {
        docs(&[
            &account("newcred", ""),
            &pull_secret("newcred", ""),
            &app_job(hook),
        ])
    };
    let report = run(&current, &rotated("pre-upgrade"));
    assert!(report.is_safe(), "{}", report.to_text());
    assert_eq!(report.references_checked, 1);
    // After the change, it runs as the updated account, and finds newcred.
    assert!(run(&current, &rotated("post-upgrade")).is_safe());
    // Deleting, with the change, the Secret the account has now leaves the
    // pre-upgrade Job as it was: it runs before the deletion.
    let report = run_with(
        &current,
        &rotated("pre-upgrade"),
        Deletion::Listed,
        &["Secret/default/oldcred"],
    );
    assert!(report.is_safe(), "{}", report.to_text());
    // An account the state now lacks (one the chart makes as an earlier
    // hook, say) is the one the change brings: its pull secret is judged
    // as the Job's own.
    let report = run(NOTHING, &rotated("pre-install"));
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), None)],
        "{}",
        report.to_text()
    );
    // And a Secret the account has now that is gone fails as for any pod.
    let report = run(&account("oldcred", ""), &app_job("pre-upgrade"));
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{}",
        report.to_text()
    );
}

#[test]
fn a_pod_runs_as_its_account_as_the_change_has_made_it_by_then() {
    // A ServiceAccount may itself be a hook, or in an Argo CD sync wave:
    // a pod gets the pull secrets of the account as it is when the pod is
    // admitted, so the updated account's only if the change has applied it
    // by then; else the account as it is now.
    let job = &app_job("pre-upgrade");
    let web = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      serviceAccountName: app\n      containers:\n        - name: web\n          image: registry.example/app:2\n";
    let current = docs(&[&account("oldcred", ""), &pull_secret("oldcred", "")]);

    // The account is a pre-upgrade hook created before the Job (a lower
    // weight): the Job's pod runs as the updated account, and its new pull
    // secret comes only with the change. Before, the Job was judged by the
    // account as it is now, and passed.
    let hook_account = "helm.sh/hook: pre-upgrade, helm.sh/hook-weight: \"-5\"";
    let report = run(
        &current,
        &docs(&[
            &account("newcred", hook_account),
            &pull_secret("newcred", ""),
            job,
        ]),
    );
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), None)],
        "{}",
        report.to_text()
    );
    // Made a hook created before the Job too, the new pull secret is there.
    let report = run(
        &current,
        &docs(&[
            &account("newcred", hook_account),
            &pull_secret("newcred", hook_account),
            job,
        ]),
    );
    assert!(report.is_safe(), "{}", report.to_text());
    // An account hook created after the Job (a higher weight) is as it is
    // now when the Job runs.
    let later = "helm.sh/hook: pre-upgrade, helm.sh/hook-weight: \"5\"";
    let report = run(
        &current,
        &docs(&[&account("newcred", later), &pull_secret("newcred", ""), job]),
    );
    assert!(report.is_safe(), "{}", report.to_text());

    // A Deployment of wave 0, its account updated in wave 1 with the new
    // pull secret: its new pods run as the account as it is now, whose
    // pull secret is still there. Before, they were judged by the updated
    // account, and failed (the new Secret comes in a later wave).
    let wave_1 = "argocd.argoproj.io/sync-wave: \"1\"";
    let report = run(
        &current,
        &docs(&[
            &account("newcred", wave_1),
            &pull_secret("newcred", wave_1),
            web,
        ]),
    );
    assert!(report.is_safe(), "{}", report.to_text());
    // In the Deployment's wave, the account is applied first: its new pods
    // run as the updated one, whose pull secret comes only in wave 1.
    let report = run(
        &current,
        &docs(&[
            &account("newcred", ""),
            &pull_secret("newcred", wave_1),
            web,
        ]),
    );
    assert_eq!(
        codes(&report),
        vec![("later-sync-wave".into(), None)],
        "{}",
        report.to_text()
    );

    // The account updated by a post-upgrade hook, the Secret it names now
    // deleted with the change: the Deployment's new pods start before that
    // hook runs, as the account as it is now, and its pull secret is gone.
    // Before, they were judged by the updated account, and passed. So with
    // a hook the change never runs (a `test` hook).
    for hook in ["helm.sh/hook: post-upgrade", "helm.sh/hook: test"] {
        let report = run_with(
            &current,
            &docs(&[&account("newcred", hook), &pull_secret("newcred", ""), web]),
            Deletion::Listed,
            &["Secret/default/oldcred"],
        );
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), None)],
            "{hook}: {}",
            report.to_text()
        );
    }
}
