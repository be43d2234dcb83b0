//! The CLI: exit codes, output formats, and the canary test (values never
//! appear anywhere).
#![cfg(feature = "cli")]

use std::path::Path;
use std::process::{Command, Output};

const CANARY: &str = "CANARY-7f3a9c-DO-NOT-PRINT";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ate-configguard"))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `ate-configguard check --current CURRENT --proposed PROPOSED`.
fn check(current: &str, proposed: &str) -> Output {
    check_with(current, proposed, &[])
}

/// The same with `more` arguments after.
fn check_with(current: &str, proposed: &str, more: &[&str]) -> Output {
    bin()
        .args(["check", "--current", current, "--proposed", proposed])
        .args(more)
        .output()
        .unwrap()
}

fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn current(dir: &Path) -> String {
    write(
        dir,
        "current.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: creds }}\nstringData:\n  PASSWORD: {CANARY}\n  TOKEN: \"{CANARY}\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cfg }}\ndata:\n  DB_HOST: {CANARY}\n  REDIS: {CANARY}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{ name: web }}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: app\n          envFrom: [ {{ configMapRef: {{ name: cfg }} }}, {{ secretRef: {{ name: creds }} }} ]\n"
        ),
    )
}

mod ci;
mod input;
mod io;
mod retire;
mod rollout;
mod secrecy;
mod verdicts;
