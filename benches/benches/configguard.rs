//! ate-configguard: check time against input size (1k / 10k / 50k
//! workloads, as many ConfigMaps/Secrets), from YAML text and from the
//! parsed model.

use std::fmt::Write;
use std::hint::black_box;

use ate_configguard::{CheckInput, LoadOptions, check, load_str};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// `n` Deployments, each reading its own ConfigMap (envFrom + a key ref)
/// and its own Secret (a secret volume with items).
pub fn synthetic(n: usize) -> String {
    let mut s = String::with_capacity(n * 900);
    for i in 0..n {
        let _ = write!(
            s,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cm-{i}, namespace: ns-{ns} }}\ndata: {{ A: a, B: b, C: c }}\n---\n\
apiVersion: v1\nkind: Secret\nmetadata: {{ name: sec-{i}, namespace: ns-{ns} }}\ndata: {{ token: dG9r }}\n---\n\
apiVersion: apps/v1\nkind: Deployment\nmetadata: {{ name: app-{i}, namespace: ns-{ns} }}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: app:1\n          envFrom: [ {{ configMapRef: {{ name: cm-{i} }} }} ]\n          env:\n            - name: A\n              valueFrom: {{ configMapKeyRef: {{ name: cm-{i}, key: A }} }}\n      volumes:\n        - name: s\n          secret: {{ secretName: sec-{i}, items: [ {{ key: token, path: token }} ] }}\n---\n",
            ns = i % 50
        );
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("configguard/check");
    g.sample_size(10);
    // `cargo test --benches` (CI's smoke run, unoptimized) runs each bench
    // once: keep it to the smallest size there.
    let sizes: &[usize] = if std::env::args().any(|a| a == "--bench") {
        &[1_000, 10_000, 50_000]
    } else {
        &[1_000]
    };
    for &n in sizes {
        let text = synthetic(n);
        let opts = LoadOptions::default();
        g.bench_with_input(BenchmarkId::new("load_and_check", n), &text, |b, text| {
            b.iter(|| {
                let current = load_str(text, "current.yaml", &opts).unwrap();
                let proposed = current.clone();
                let r = check(&CheckInput {
                    current,
                    proposed,
                    ..Default::default()
                })
                .unwrap();
                black_box(r.is_safe())
            })
        });
        let current = load_str(&text, "current.yaml", &opts).unwrap();
        let input = CheckInput {
            current: current.clone(),
            proposed: current,
            ..Default::default()
        };
        g.bench_with_input(BenchmarkId::new("check_only", n), &input, |b, input| {
            b.iter(|| black_box(check(input).unwrap().is_safe()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
