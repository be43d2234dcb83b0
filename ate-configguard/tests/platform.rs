//! ConfigMaps the platform injects into every namespace resolve without
//! being in the input: Kubernetes' `kube-root-ca.crt` and OpenShift's
//! `openshift-service-ca.crt`, each for the one key it holds.

mod common;

use common::*;

/// A live OpenShift pod: its `kube-api-access` projection reads both.
fn live_pod(service_ca_key: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-1\n  namespace: shop\n  uid: 1\n  \
         resourceVersion: \"7\"\nspec:\n  containers:\n    - name: web\n      image: img\n  \
         volumes:\n    - name: kube-api-access-x1\n      projected:\n        sources:\n          \
         - serviceAccountToken: {{path: token}}\n          \
         - configMap:\n              name: kube-root-ca.crt\n              items: [{{key: ca.crt, path: ca.crt}}]\n          \
         - configMap:\n              name: openshift-service-ca.crt\n              \
         items: [{{key: {service_ca_key}, path: service-ca.crt}}]\n"
    )
}

#[test]
fn a_live_openshift_pod_reads_the_injected_service_ca_without_it_in_the_input() {
    let pod = live_pod("service-ca.crt");
    let report = run(&pod, &pod);
    assert!(report.failures.is_empty(), "{report:?}");
    // Another key of it is not the platform's: that still fails, as the
    // missing key of an object that is there.
    let odd = live_pod("other.crt");
    let report = run(&odd, &odd);
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("other.crt".into()))],
        "{report:?}"
    );
    assert!(
        report.failures[0]
            .message
            .contains("holds only the key service-ca.crt"),
        "{report:?}"
    );
}
