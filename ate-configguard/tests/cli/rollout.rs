//! `rollout` and `rollback-plan`: exit codes, every output format, waivers
//! listed, standard input, and no value printed.

use std::io::Write;
use std::process::Stdio;

use super::*;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A served Deployment with no preStop hook (a `prestop` failure), beside
/// a Secret and a ConfigMap holding the canary.
fn unsafe_manifest(dir: &Path) -> String {
    write(
        dir,
        "web.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: creds}}\nstringData: {{PASSWORD: \
             {CANARY}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg}}\ndata: \
             {{DB: {CANARY}}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: \
             web}}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: \
             {{labels: {{app: web}}}}\n    spec:\n      containers:\n        - name: web\n          \
             image: registry.example/web@{DIGEST}\n          envFrom: [{{configMapRef: {{name: \
             cfg}}}}]\n          env: [{{name: ATE_DRAIN_TIMEOUT_SECS, value: '5'}}]\n          \
             readinessProbe: {{httpGet: {{path: /ready, port: 8080}}}}\n          livenessProbe: \
             {{httpGet: {{path: /health, port: 8080}}}}\n---\napiVersion: v1\nkind: Service\n\
             metadata: {{name: web}}\nspec: {{selector: {{app: web}}, ports: [{{port: 80, \
             targetPort: 8080}}]}}\n"
        ),
    )
}

fn rollout(args: &[&str]) -> Output {
    bin().arg("rollout").args(args).output().unwrap()
}

#[test]
fn the_examples_manifests_pass_and_a_missing_prestop_fails_with_its_place() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/k8s");
    let ok = rollout(&[examples]);
    assert_eq!(ok.status.code(), Some(0), "{}", all_output(&ok));
    let tmp = tempfile::tempdir().unwrap();
    let file = unsafe_manifest(tmp.path());
    let bad = rollout(&[&file]);
    assert_eq!(bad.status.code(), Some(1), "{}", all_output(&bad));
    let out = all_output(&bad);
    assert!(
        out.contains(&format!(
            "{file}:11: FAIL [prestop] Deployment/default/web container web"
        )),
        "{out}"
    );
    assert!(!out.contains(CANARY), "{out}");
}

#[test]
fn every_format_carries_the_findings_and_the_waived_and_no_value() {
    let tmp = tempfile::tempdir().unwrap();
    let file = unsafe_manifest(tmp.path());
    let json = rollout(&[&file, "--format", "json"]);
    assert_eq!(json.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["result"], "unsafe");
    assert_eq!(doc["failures"][0]["code"], "prestop");
    assert_eq!(doc["failures"][0]["source"]["line"], 11);
    // Waived: safe, and still listed in each format.
    let waived = rollout(&[&file, "--allow", "prestop=web", "--format", "json"]);
    assert_eq!(waived.status.code(), Some(0), "{}", all_output(&waived));
    let doc: serde_json::Value = serde_json::from_slice(&waived.stdout).unwrap();
    assert_eq!(doc["waived"][0]["code"], "prestop");
    let sarif = rollout(&[&file, "--allow", "prestop", "--format", "sarif"]);
    let log: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let result = &log["runs"][0]["results"][0];
    assert_eq!(result["ruleId"], "prestop");
    assert_eq!(result["suppressions"][0]["kind"], "external");
    let github = rollout(&[&file, "--allow", "prestop", "--format", "github"]);
    let out = String::from_utf8_lossy(&github.stdout).into_owned();
    assert!(
        out.contains("::notice file=") && out.contains("title=waived prestop::"),
        "{out}"
    );
    let github = rollout(&[&file, "--format", "github"]);
    let out = String::from_utf8_lossy(&github.stdout).into_owned();
    assert!(
        out.contains(&format!("::error file={file},line=11,title=prestop::")),
        "{out}"
    );
    for o in [&json, &waived, &sarif, &github] {
        assert!(!all_output(o).contains(CANARY));
    }
}

#[test]
fn standard_input_and_unusable_input_answer_as_check_does() {
    let tmp = tempfile::tempdir().unwrap();
    let file = unsafe_manifest(tmp.path());
    let mut child = bin()
        .args(["rollout", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(std::fs::read_to_string(&file).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("<stdin>:11: FAIL [prestop]"));
    let negative = write(
        tmp.path(),
        "neg.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {}\n  \
         template:\n    spec:\n      terminationGracePeriodSeconds: -5\n      containers: [{name: \
         web, image: web}]\n",
    );
    let o = rollout(&[&negative, "--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", all_output(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["result"], "unusable_input");
    assert!(doc["error"].as_str().unwrap().contains("negative"));
    let o = rollout(&[&file, "--allow", "no-such-rule"]);
    assert_eq!(o.status.code(), Some(2), "{}", all_output(&o));
}

#[test]
fn rollback_plan_prints_restore_commands_and_never_runs_them() {
    let tmp = tempfile::tempdir().unwrap();
    let live = write(
        tmp.path(),
        "live.yaml",
        &format!(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  \
             metadata: {{name: web, namespace: prod}}\n  spec:\n    selector: {{matchLabels: \
             {{app: web}}}}\n    template:\n      metadata: {{labels: {{app: web}}}}\n      spec: \
             {{containers: [{{name: web, image: 'registry.example/web:1.4'}}]}}\n- apiVersion: \
             v1\n  kind: Pod\n  metadata: {{name: web-1, namespace: prod, labels: {{app: web}}}}\n  \
             spec: {{containers: [{{name: web, image: 'registry.example/web:1.4'}}]}}\n  status: \
             {{containerStatuses: [{{name: web, image: 'registry.example/web:1.4', imageID: \
             'registry.example/web@{DIGEST}', ready: true, restartCount: 0}}]}}\n"
        ),
    );
    let o = bin().args(["rollback-plan", &live]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", all_output(&o));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["version"], 1);
    assert_eq!(
        plan["entries"][0]["restore"],
        format!("kubectl -n prod set image deployment/web web=registry.example/web@{DIGEST}")
    );
    assert_eq!(plan["entries"][0]["exact"], true);
}
