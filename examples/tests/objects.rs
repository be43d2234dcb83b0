//! The generation latch API and its background reconciler.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn spec_changes_bump_generation_and_the_reconciler_converges() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_CONTROL_TOKEN", "t0k")]);
        let c = client();
        let put = |body: Value| c.put(s.url("/objects/gw")).json(&body).send();
        let created: Value = put(json!({"replicas": 2}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (
                created["generation"].as_u64(),
                created["converged"].as_bool()
            ),
            (Some(1), Some(false)),
            "{bin}"
        );
        let url = s.url("/objects/gw");
        eventually(Duration::from_secs(5), || {
            let (c, url) = (c.clone(), url.clone());
            async move {
                c.get(url)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()["converged"]
                    == true
            }
        })
        .await;
        // Same spec: no bump.
        let same: Value = put(json!({"replicas": 2}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(same["generation"], 1);
        // Changed spec on a converged ("running") object: bump and re-apply.
        let changed: Value = put(json!({"replicas": 3}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(changed["generation"], 2);
        eventually(Duration::from_secs(5), || {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let o = c
                    .get(url)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap();
                o["observedGeneration"] == 2 && o["converged"] == true
            }
        })
        .await;
        assert_eq!(
            c.get(s.url("/objects/none")).send().await.unwrap().status(),
            404
        );
    }
}

#[tokio::test]
async fn observed_write_back_is_control_plane_only_and_monotonic() {
    for bin in SERVICES {
        // Reconciler off: the test is the control plane.
        let s = Service::start(
            bin,
            &[
                ("ATE_CONTROL_TOKEN", "t0k"),
                ("ATE_RECONCILE_INTERVAL_MS", "0"),
            ],
        );
        let c = client();
        c.put(s.url("/objects/gw"))
            .json(&json!({"v": 1}))
            .send()
            .await
            .unwrap();
        c.put(s.url("/objects/gw"))
            .json(&json!({"v": 2}))
            .send()
            .await
            .unwrap();
        let observe = |token: Option<&str>, n: u64| {
            let mut r = c
                .post(s.url("/objects/gw/observed"))
                .json(&json!({"observedGeneration": n}));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send()
        };
        assert_eq!(
            observe(None, 1).await.unwrap().status(),
            403,
            "{bin}: client write"
        );
        assert_eq!(observe(Some("wrong"), 1).await.unwrap().status(), 403);
        let ok = observe(Some("t0k"), 2).await.unwrap();
        assert_eq!(ok.status(), 200);
        let regress = observe(Some("t0k"), 1).await.unwrap();
        assert_eq!(regress.status(), 409);
        let body: Value = regress.json().await.unwrap();
        assert_eq!(
            (
                body["observedGeneration"].as_u64(),
                body["attempted"].as_u64()
            ),
            (Some(2), Some(1)),
            "{body}"
        );
        let over = observe(Some("t0k"), 9).await.unwrap();
        assert_eq!(over.status(), 409);
        let body: Value = over.json().await.unwrap();
        assert_eq!(
            (body["generation"].as_u64(), body["attempted"].as_u64()),
            (Some(2), Some(9))
        );
        assert_eq!(
            observe(Some("t0k"), 2).await.unwrap().status(),
            200,
            "same value again: no-op"
        );
        let bad = c
            .post(s.url("/objects/gw/observed"))
            .bearer_auth("t0k")
            .body("{\"generation\": 1}")
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400);
    }
}
