//! The rollout gate's rules: each failure here is what the rule exists to
//! catch, beside the nearest manifest that passes.

use ate_configguard::rollout::{RolloutOptions, Waiver, load_str, rollback_plan, rollout};
use ate_configguard::{InputError, LoadOptions, Report, Severity};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A served Deployment `web` whose container is `container` (YAML at the
/// container's indentation, after `- name: web`), `spec` lines under the
/// Deployment's spec and `pod` lines under the pod spec.
fn web(spec: &str, pod: &str, container: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 3\n  \
         selector: {{matchLabels: {{app: web}}}}\n{spec}  template:\n    metadata: {{labels: \
         {{app: web}}}}\n    spec:\n{pod}      containers:\n        - name: web\n{container}\
         ---\napiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec: {{selector: {{app: \
         web}}, ports: [{{port: 80, targetPort: http}}]}}\n"
    )
}

/// A container that passes every rule.
fn good() -> String {
    format!(
        "          image: registry.example/web@{DIGEST}\n          ports: [{{name: http, \
         containerPort: 8080}}]\n          readinessProbe: {{httpGet: {{path: /ready, port: \
         http}}, periodSeconds: 2, failureThreshold: 1}}\n          livenessProbe: {{httpGet: \
         {{path: /health, port: http}}}}\n          lifecycle: {{preStop: {{exec: {{command: \
         [/app/web, drain, --sleep, '10']}}}}}}\n          env: [{{name: ATE_DRAIN_TIMEOUT_SECS, \
         value: '10'}}]\n"
    )
}

fn gate(yaml: &str) -> Result<Report, InputError> {
    gate_with(yaml, &RolloutOptions::default())
}

fn gate_with(yaml: &str, options: &RolloutOptions) -> Result<Report, InputError> {
    rollout(&load_str(yaml, "m.yaml", &LoadOptions::default())?, options)
}

/// The (severity, code) of every finding.
fn found(report: &Report) -> Vec<(Severity, String)> {
    report
        .failures
        .iter()
        .chain(&report.warnings)
        .map(|f| (f.severity, f.code.to_string()))
        .collect()
}

fn fails(yaml: &str, code: &str) -> Report {
    let report = gate(yaml).unwrap();
    assert!(
        report.failures.iter().any(|f| f.code == code),
        "expected a {code} failure:\n{}",
        report.to_rollout_text()
    );
    report
}

fn warns(yaml: &str, code: &str) {
    let report = gate(yaml).unwrap();
    assert!(
        report.warnings.iter().any(|f| f.code == code),
        "expected a {code} warning:\n{}",
        report.to_rollout_text()
    );
}

fn clean(yaml: &str) {
    let report = gate(yaml).unwrap();
    assert!(
        report.failures.is_empty() && report.warnings.is_empty(),
        "{}",
        report.to_rollout_text()
    );
}

fn unusable(yaml: &str, says: &str) {
    let e = gate(yaml).unwrap_err();
    assert!(e.to_string().contains(says), "{e}");
}

#[test]
fn a_well_made_served_deployment_passes() {
    clean(&web("", "", &good()));
}

#[test]
fn probe_split_fails_a_serving_container_without_readiness() {
    let c = good().replace("readinessProbe", "startupProbe");
    let r = fails(&web("", "", &c), "probe-split");
    let f = &r.failures[0];
    assert_eq!(f.container.as_deref(), Some("web"));
    assert_eq!(f.workload.as_ref().unwrap().name, "web");
    assert_eq!(f.source.as_ref().unwrap().line, 1);
    // Not served: no Service selects it, no rule about serving applies.
    let unserved = web("", "", &c).split("---").next().unwrap().to_owned();
    assert!(
        found(&gate(&unserved).unwrap())
            .iter()
            .all(|(_, c)| c != "probe-split")
    );
}

#[test]
fn probe_split_sees_one_endpoint_through_five_spellings() {
    for live in [
        "/ready",
        "/ready/",
        "//ready",
        "/./ready",
        "/re%61dy",
        "/ready?probe=live",
    ] {
        for port in ["http", "8080"] {
            let c = good().replace(
                "livenessProbe: {httpGet: {path: /health, port: http}}",
                &format!("livenessProbe: {{httpGet: {{path: '{live}', port: {port}}}}}"),
            );
            fails(&web("", "", &c), "probe-split");
        }
    }
    // Same path, another port: another endpoint.
    let c = good().replace(
        "livenessProbe: {httpGet: {path: /health, port: http}}",
        "livenessProbe: {httpGet: {path: /ready, port: 9090}}",
    );
    clean(&web("", "", &c));
    // exec, grpc and tcpSocket compare by what they ask.
    for (r, l, same) in [
        (
            "{exec: {command: [a, b]}}",
            "{exec: {command: [a, b]}}",
            true,
        ),
        (
            "{exec: {command: [a, b]}}",
            "{exec: {command: [a, c]}}",
            false,
        ),
        (
            "{grpc: {port: 9000}}",
            "{grpc: {port: 9000, service: ''}}",
            true,
        ),
        (
            "{grpc: {port: 9000, service: ready}}",
            "{grpc: {port: 9000, service: live}}",
            false,
        ),
        (
            "{tcpSocket: {port: http}}",
            "{tcpSocket: {port: 8080}}",
            true,
        ),
    ] {
        let c = good()
            .replace(
                "readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 2, failureThreshold: 1}",
                &format!("readinessProbe: {r}"),
            )
            .replace(
                "livenessProbe: {httpGet: {path: /health, port: http}}",
                &format!("livenessProbe: {l}"),
            );
        let report = gate(&web("", "", &c)).unwrap();
        let split = report.failures.iter().any(|f| f.code == "probe-split");
        assert_eq!(split, same, "{r} vs {l}: {}", report.to_rollout_text());
    }
}

#[test]
fn probe_split_fails_a_port_name_no_container_declares_and_warns_without_liveness() {
    let c = good().replace("path: /health, port: http", "path: /health, port: admin");
    let r = fails(&web("", "", &c), "probe-split");
    assert!(
        r.failures[0].message.contains("`admin`"),
        "{}",
        r.failures[0].message
    );
    let c = good().replace("livenessProbe", "startupProbe");
    warns(&web("", "", &c), "probe-split");
}

#[test]
fn liveness_first_warns_when_liveness_acts_before_readiness() {
    let c = good().replace(
        "readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 2, failureThreshold: 1}",
        "readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 10, failureThreshold: 6}",
    );
    warns(&web("", "", &c), "liveness-first");
}

#[test]
fn prestop_fails_a_serving_container_without_a_working_hook() {
    let hook = "lifecycle: {preStop: {exec: {command: [/app/web, drain, --sleep, '10']}}}";
    for bad in [
        "terminationMessagePolicy: File",
        "lifecycle: {preStop: {tcpSocket: {port: 8080}}}",
        "lifecycle: {preStop: {httpGet: {path: /__internal/drain, port: 8080}}}",
        "lifecycle: {preStop: {httpGet: {path: /quit, port: 8080, host: 127.0.0.1}}}",
    ] {
        fails(&web("", "", &good().replace(hook, bad)), "prestop");
    }
    for works in [
        "lifecycle: {preStop: {exec: {command: [sleep, '10']}}}",
        "lifecycle: {preStop: {exec: {command: [/bin/sh, -c, 'echo bye; sleep 10']}}}",
        "lifecycle: {preStop: {sleep: {seconds: 10}}}",
    ] {
        clean(&web("", "", &good().replace(hook, works)));
    }
    unusable(
        &web("", "", &good().replace(hook, "lifecycle: {preStop: {}}")),
        "unknown hook form",
    );
}

#[test]
fn grace_budget_fails_a_grace_period_under_prestop_plus_drain_plus_margin() {
    // 10 + 10 + 5 = 25 <= 30 (unset): passes; 20 + 10 + 5 = 35 > 30: fails.
    let c = good().replace("--sleep, '10'", "--sleep, '20'");
    let r = fails(&web("", "", &c), "grace-budget");
    assert!(
        r.failures[0].message.contains("at least 35"),
        "{}",
        r.failures[0].message
    );
    clean(&web("", "      terminationGracePeriodSeconds: 35\n", &c));
    // The margin is the user's to set.
    let mut options = RolloutOptions::default();
    options.grace_margin = 0;
    assert!(gate_with(&web("", "", &c), &options).unwrap().is_safe());
    // The native sleep counts too, and the annotation's drain wait.
    let native = good().replace(
        "exec: {command: [/app/web, drain, --sleep, '10']}",
        "sleep: {seconds: 10}",
    );
    let annotated = web("", "", &native).replacen(
        "metadata: {name: web}",
        "metadata: {name: web, annotations: {ate.dev/drain-timeout-seconds: '25'}}",
        1,
    );
    fails(&annotated, "grace-budget");
}

#[test]
fn grace_budget_warns_budget_unknown_rather_than_passing() {
    // The drain wait held only in a ConfigMap.
    let c = good().replace(
        "env: [{name: ATE_DRAIN_TIMEOUT_SECS, value: '10'}]",
        "envFrom: [{configMapRef: {name: settings}}]",
    );
    let report = gate(&web("", "", &c)).unwrap();
    let w = report
        .warnings
        .iter()
        .find(|f| f.code == "grace-budget")
        .unwrap();
    assert!(
        w.message.contains("ate.dev/drain-timeout-seconds"),
        "{}",
        w.message
    );
    // An exec hook whose time cannot be read.
    let c = good().replace(
        "[/app/web, drain, --sleep, '10']",
        "[/usr/sbin/nginx, -s, quit]",
    );
    let report = gate(&web("", "", &c)).unwrap();
    let w = report
        .warnings
        .iter()
        .find(|f| f.code == "grace-budget")
        .unwrap();
    assert!(
        w.message.contains("ate.dev/prestop-seconds"),
        "{}",
        w.message
    );
}

#[test]
fn grace_periods_the_api_server_refuses_are_unusable_input() {
    unusable(
        &web("", "      terminationGracePeriodSeconds: -1\n", &good()),
        "negative",
    );
    let e = gate(&web(
        "",
        "      terminationGracePeriodSeconds: 2.5\n",
        &good(),
    ))
    .unwrap_err();
    assert!(e.to_string().contains("(line 1)"), "{e}");
    let e = gate(&web(
        "",
        "      terminationGracePeriodSeconds: soon\n",
        &good(),
    ))
    .unwrap_err();
    assert!(
        e.to_string().contains("terminationGracePeriodSeconds"),
        "{e}"
    );
}

#[test]
fn lb_drain_fails_a_balancer_that_drains_longer_than_pods_live_or_checks_liveness() {
    let annotate = |yaml: String, annotation: &str| {
        yaml.replace(
            "kind: Service\nmetadata: {name: web}",
            &format!("kind: Service\nmetadata: {{name: web, annotations: {{{annotation}}}}}"),
        )
    };
    let backend = |spec: &str| {
        format!(
            "---\napiVersion: cloud.google.com/v1\nkind: BackendConfig\nmetadata: {{name: bc}}\nspec: {spec}\n"
        )
    };
    let gke = annotate(
        web("", "", &good()),
        "cloud.google.com/backend-config: '{\"default\": \"bc\"}'",
    );
    fails(
        &(gke.clone() + &backend("{connectionDraining: {drainingTimeoutSec: 60}}")),
        "lb-drain",
    );
    clean(&(gke.clone() + &backend("{connectionDraining: {drainingTimeoutSec: 20}}")));
    let r = fails(
        &(gke.clone() + &backend("{healthCheck: {requestPath: /health}}")),
        "lb-drain",
    );
    assert!(
        r.failures[0].message.contains("liveness path"),
        "{}",
        r.failures[0].message
    );
    clean(&(gke + &backend("{healthCheck: {requestPath: /ready}}")));
    fails(
        &annotate(
            web("", "", &good()),
            "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout: '300'",
        ),
        "lb-drain",
    );
    let ingress = "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\n  \
        annotations: {alb.ingress.kubernetes.io/target-group-attributes: \
        'deregistration_delay.timeout_seconds=120'}\nspec: {defaultBackend: {service: {name: web, \
        port: {number: 80}}}}\n";
    fails(&(web("", "", &good()) + ingress), "lb-drain");
    clean(&(web("", "", &good()) + &ingress.replace("=120", "=25")));
}

#[test]
fn image_identity_fails_ambiguous_and_mutable_references() {
    let with = |image: &str| good().replace(&format!("registry.example/web@{DIGEST}"), image);
    for bad in [
        format!("registry.example/web:1.4@{DIGEST}"),
        "registry.example/web".into(),
        "registry.example/web:latest".into(),
        "registry.example/web@sha256:abc".into(),
        "Registry.Example/Web:1".into(),
    ] {
        fails(&web("", "", &with(&bad)), "image-identity");
    }
    let always = good().replace("image:", "imagePullPolicy: Always\n          image:");
    fails(&web("", "", &always), "image-identity");
    warns(
        &web("", "", &with("registry.example/web:1.4")),
        "image-identity",
    );
    let mut strict = RolloutOptions::default();
    strict.require_digest = true;
    let r = gate_with(&web("", "", &with("registry.example/web:1.4")), &strict).unwrap();
    assert!(r.failures.iter().any(|f| f.code == "image-identity"));
}

#[test]
fn headroom_fails_a_rollout_that_takes_every_pod_out() {
    let strategy = |u: &str, s: &str| {
        format!(
            "  strategy: {{type: RollingUpdate, rollingUpdate: {{maxUnavailable: {u}, maxSurge: {s}}}}}\n"
        )
    };
    fails(&web(&strategy("100%", "0"), "", &good()), "headroom");
    fails(&web(&strategy("3", "1"), "", &good()), "headroom");
    clean(&web(&strategy("'34%'", "0"), "", &good())); // rounds down to 1 of 3
    clean(&web(&strategy("0", "1"), "", &good()));
    unusable(&web(&strategy("'101%'", "0"), "", &good()), "over 100%");
    unusable(&web(&strategy("'1'", "0"), "", &good()), "percentage");
    unusable(&web(&strategy("0", "0"), "", &good()), "both 0");
    // One replica from the autoscaler: 25% of 1 rounds down to 0
    // unavailable, so a pod keeps serving.
    let hpa = "---\napiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: web}\n\
        spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, minReplicas: 1, \
        maxReplicas: 5}\n";
    clean(&(web("", "", &good()).replace("  replicas: 3\n", "") + hpa));
    fails(
        &(web(&strategy("1", "0"), "", &good()).replace("  replicas: 3\n", "") + hpa),
        "headroom",
    );
    warns(
        &web("  strategy: {type: Recreate}\n", "", &good()),
        "headroom",
    );
}

#[test]
fn headroom_warns_a_disruption_budget_at_odds_with_the_rollout() {
    let pdb = |spec: &str| {
        format!(
            "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web}}\nspec: {{selector: {{matchLabels: {{app: web}}}}, {spec}}}\n"
        )
    };
    warns(
        &(web("", "", &good()) + &pdb("minAvailable: 3")),
        "headroom",
    );
    warns(
        &(web("", "", &good()) + &pdb("maxUnavailable: 0")),
        "headroom",
    );
    let strategy = "  strategy: {rollingUpdate: {maxUnavailable: 2, maxSurge: 0}}\n";
    warns(
        &(web(strategy, "", &good()) + &pdb("minAvailable: 2")),
        "headroom",
    );
    clean(&(web("", "", &good()) + &pdb("maxUnavailable: 1")));
}

#[test]
fn single_writer_fails_a_workload_that_can_run_two_pods() {
    let annotated = |yaml: String| {
        yaml.replacen(
            "metadata: {name: web}",
            "metadata: {name: web, annotations: {ate.dev/single-writer: 'true'}}",
            1,
        )
    };
    let one = |strategy: &str| web(strategy, "", &good()).replace("replicas: 3", "replicas: 1");
    fails(&annotated(one("")), "single-writer");
    assert!(
        gate(&annotated(one("  strategy: {type: Recreate}\n")))
            .unwrap()
            .is_safe()
    );
    fails(
        &annotated(web("  strategy: {type: Recreate}\n", "", &good())),
        "single-writer",
    );
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, annotations: \
        {ate.dev/single-writer: 'true'}}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: db}}\n  \
        template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: db, image: 'db@"
        .to_owned()
        + DIGEST
        + "'}]}\n";
    fails(&sts, "single-writer");
    assert!(
        gate(&sts.replace("replicas: 2", "replicas: 1"))
            .unwrap()
            .is_safe()
    );
    let ds = sts
        .replace("StatefulSet", "DaemonSet")
        .replace("  replicas: 2\n", "");
    fails(&ds, "single-writer");
    unusable(&sts.replace("'true'", "'yes'"), "ate.dev/single-writer");
    // Unquoted, the API server refuses it; read as absent it would pass.
    unusable(&sts.replace("'true'", "true"), "not a string");
}

#[test]
fn waivers_set_a_rule_aside_and_say_so() {
    let c = good().replace("readinessProbe", "startupProbe");
    let yaml = web("", "", &c);
    for allow in [
        "probe-split",
        "probe-split=web",
        "probe-split=default/web",
        "probe-split=Deployment/default/web",
    ] {
        let mut options = RolloutOptions::default();
        options.allow = vec![Waiver::parse(allow).unwrap()];
        let r = gate_with(&yaml, &options).unwrap();
        assert!(r.is_safe(), "{allow}: {}", r.to_rollout_text());
        assert_eq!(r.waived.len(), 1);
        assert!(r.to_rollout_text().contains("WAIVED FAIL [probe-split]"));
    }
    let mut options = RolloutOptions::default();
    options.allow = vec![Waiver::parse("probe-split=other").unwrap()];
    let r = gate_with(&yaml, &options).unwrap();
    assert!(!r.is_safe());
    assert!(r.warnings.iter().any(|f| f.code == "waiver-unused"));
    let annotated = yaml.replacen(
        "metadata: {name: web}",
        "metadata: {name: web, annotations: {ate.dev/rollout-allow: 'probe-split, prestop'}}",
        1,
    );
    let r = gate(&annotated).unwrap();
    assert!(r.is_safe(), "{}", r.to_rollout_text());
    assert!(
        r.warnings
            .iter()
            .any(|f| f.code == "waiver-unused" && f.message.contains("prestop"))
    );
    assert!(Waiver::parse("probe-splitt").is_err());
    unusable(
        &annotated.replace("prestop", "prestopp"),
        "not a rollout rule code",
    );
}

#[test]
fn no_config_value_reaches_any_output() {
    let canary = "CANARY-c4f1";
    let yaml = format!(
        "{}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s, annotations: \
         {{kubectl.kubernetes.io/last-applied-configuration: '{canary}'}}}}\nstringData: {{k: \
         {canary}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{k: \
         {canary}}}\n",
        web(
            "",
            "",
            &good()
                .replace("readinessProbe", "startupProbe")
                .replace("value: '10'", &format!("value: '{canary}'")),
        )
        .replacen(
            "metadata: {name: web}",
            &format!("metadata: {{name: web, annotations: {{note: '{canary}'}}}}"),
            1,
        )
    );
    let r = gate(&yaml).unwrap();
    let text = format!(
        "{}{}",
        r.to_rollout_text(),
        serde_json::to_string(&r).unwrap()
    );
    assert!(!r.failures.is_empty());
    assert!(!text.contains(canary), "{text}");
}

#[test]
fn unknown_kinds_with_pod_templates_fail_closed_unless_allowed() {
    let rollout_kind = web("", "", &good())
        .replacen(
            "apiVersion: apps/v1\nkind: Deployment",
            "apiVersion: argoproj.io/v1alpha1\nkind: Rollout",
            1,
        )
        .replace("readinessProbe", "startupProbe");
    let e = load_str(&rollout_kind, "m.yaml", &LoadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("--allow-kind Rollout"), "{e}");
    let options = LoadOptions {
        allow_kinds: ["Rollout".to_owned()].into(),
        ..LoadOptions::default()
    };
    let fleet = load_str(&rollout_kind, "m.yaml", &options).unwrap();
    let r = rollout(&fleet, &RolloutOptions::default()).unwrap();
    assert!(
        r.failures.iter().any(|f| f.code == "probe-split"),
        "{}",
        r.to_rollout_text()
    );
}

const LIVE: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\n\
spec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    \
spec: {containers: [{name: web, image: 'registry.example/web:1.4'}]}\n";

fn pod(name: &str, image: &str, digest: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: prod, labels: {{app: web}}}}\n\
         spec: {{containers: [{{name: web, image: '{image}'}}]}}\nstatus: {{containerStatuses: [{{name: \
         web, image: '{image}', imageID: 'docker-pullable://registry.example/web@{digest}', ready: true, \
         restartCount: 0}}]}}\n"
    )
}

#[test]
fn rollback_plan_names_the_running_digest_and_warns_when_it_cannot() {
    let plan =
        |yaml: &str| rollback_plan(&load_str(yaml, "live.yaml", &LoadOptions::default()).unwrap());
    let other = DIGEST.replace("0123", "4567");
    // The digest the current revision's pods run; an old revision's pod
    // (another image) does not count.
    let p = plan(&format!(
        "{LIVE}{}{}",
        pod("web-1", "registry.example/web:1.4", DIGEST),
        pod("web-0", "registry.example/web:1.3", &other)
    ));
    assert_eq!(p.entries.len(), 1);
    assert!(p.entries[0].exact);
    assert_eq!(p.entries[0].image, format!("registry.example/web@{DIGEST}"));
    assert_eq!(
        p.entries[0].restore,
        format!("kubectl -n prod set image deployment/web web=registry.example/web@{DIGEST}")
    );
    assert!(p.warnings.is_empty());
    // No pod: the tag alone, not exact, said so.
    let p = plan(LIVE);
    assert!(!p.entries[0].exact);
    assert_eq!(p.warnings.len(), 1);
    // Pods that disagree (the tag moved): not exact.
    let p = plan(&format!(
        "{LIVE}{}{}",
        pod("web-1", "registry.example/web:1.4", DIGEST),
        pod("web-2", "registry.example/web:1.4", &other)
    ));
    assert!(!p.entries[0].exact);
    assert!(p.warnings[0].message.contains("2 digests"));
}

#[test]
fn the_shared_real_world_sets_are_answered_without_a_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/realworld");
    let mut answered = 0;
    for set in std::fs::read_dir(&dir).unwrap().flatten() {
        if !set.path().is_dir() {
            continue;
        }
        let fleet = ate_configguard::rollout::load_paths(&[set.path()], &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", set.path().display()));
        rollout(&fleet, &RolloutOptions::default()).unwrap();
        let _ = rollback_plan(&fleet);
        answered += 1;
    }
    assert!(answered >= 2);
}
