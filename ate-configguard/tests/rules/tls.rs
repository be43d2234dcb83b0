//! Secrets named outside a pod spec (Ingress, Traefik, Contour, Gateway API): reported, not checked.

use super::*;

#[test]
fn ingress_tls_secrets_are_reported_not_checked() {
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  tls:\n    - secretName: web-tls\n";
    let report = run(ingress, NOTHING);
    assert!(report.is_safe());
    assert_eq!(report.warnings[0].code, "outside-pod-spec");
}

#[test]
fn a_tls_secret_named_outside_a_pod_spec_warns_only_when_deleted_or_unknown() {
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  tls:\n    - secretName: web-tls\n";
    let with_secret = format!(
        "{ingress}---\n{}",
        secret("web-tls", &["tls.crt", "tls.key"])
    );
    warns_only_when_deleted(&with_secret, ingress, "Secret/default/web-tls");
}

/// `with_secret` (a referrer and the Secret it names outside a pod spec)
/// kept says nothing; deleting the Secret (`id`), leaving `referrer`, is a
/// warning that says so, not a failure.
fn warns_only_when_deleted(with_secret: &str, referrer: &str, id: &str) {
    let kept = run(with_secret, with_secret);
    assert!(
        kept.is_safe() && kept.warnings.is_empty(),
        "{:?}",
        kept.warnings
    );
    let deleted = run_with(with_secret, referrer, Deletion::Listed, &[id]);
    assert!(deleted.is_safe());
    assert_eq!(deleted.warnings.len(), 1, "{:?}", deleted.warnings);
    assert_eq!(deleted.warnings[0].code, "outside-pod-spec");
    assert!(
        deleted.warnings[0].message.contains("deletes this Secret"),
        "{}",
        deleted.warnings[0].message
    );
}

#[test]
fn traefik_and_contour_secrets_are_reported_not_checked() {
    // They were read as unknown kinds without pod templates: nothing said,
    // even when the change deleted the certificate a route serves.
    let proxies = "apiVersion: traefik.io/v1alpha1\nkind: IngressRoute\nmetadata: { name: web, namespace: edge }\nspec:\n  routes: [ { match: Host(`a.example.com`), kind: Rule, services: [ { name: web, port: 80 } ] } ]\n  tls: { secretName: web-tls }\n---\napiVersion: traefik.containo.us/v1alpha1\nkind: Middleware\nmetadata: { name: auth, namespace: edge }\nspec:\n  basicAuth: { secret: users }\n---\napiVersion: traefik.io/v1alpha1\nkind: TLSStore\nmetadata: { name: default, namespace: edge }\nspec:\n  defaultCertificate: { secretName: fallback-tls }\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: { name: api, namespace: edge }\nspec:\n  virtualhost:\n    fqdn: api.example.com\n    tls:\n      secretName: certs/wildcard\n      clientValidation: { caSecret: client-ca }\n  routes: [ { services: [ { name: api, port: 80 } ] } ]\n";
    let report = run(proxies, NOTHING);
    assert!(report.is_safe());
    let mut named: Vec<(String, String)> = report
        .warnings
        .iter()
        .map(|w| {
            assert_eq!(w.code, "outside-pod-spec");
            (
                w.object.as_ref().expect("the object named").to_string(),
                w.site.clone().unwrap_or_default(),
            )
        })
        .collect();
    named.sort();
    assert_eq!(
        named,
        [
            ("Secret/certs/wildcard", "spec.virtualhost.tls.secretName"),
            (
                "Secret/edge/client-ca",
                "spec.virtualhost.tls.clientValidation.caSecret"
            ),
            (
                "Secret/edge/fallback-tls",
                "spec.defaultCertificate.secretName"
            ),
            ("Secret/edge/users", "spec.basicAuth.secret"),
            ("Secret/edge/web-tls", "spec.tls.secretName"),
        ]
        .map(|(o, s)| (o.to_owned(), s.to_owned()))
    );
    // Deleting one the route serves says so; keeping it says nothing.
    let tls = secret("web-tls", &["tls.crt", "tls.key"])
        .replace("name: web-tls", "name: web-tls\n  namespace: edge");
    let route = proxies.split("---").next().unwrap();
    let with_secret = format!("{route}---\n{tls}");
    warns_only_when_deleted(&with_secret, route, "Secret/edge/web-tls");
}

#[test]
fn gateway_api_certificate_refs_are_reported_not_checked() {
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: { name: gw, namespace: edge }\nspec:\n  gatewayClassName: istio\n  listeners:\n    - name: https\n      port: 443\n      protocol: HTTPS\n      tls:\n        certificateRefs:\n          - name: web-tls\n          - { kind: Secret, name: api-tls, namespace: certs }\n          - { group: example.com, kind: Vault, name: not-a-secret }\n  tls:\n    backend:\n      clientCertificateRef: { name: mesh-client }\n---\napiVersion: gateway.networking.k8s.io/v1alpha3\nkind: BackendTLSPolicy\nmetadata: { name: backend, namespace: edge }\nspec:\n  validation:\n    caCertificateRefs: [ { group: \"\", kind: ConfigMap, name: ca } ]\n    hostname: api.internal\n";
    let report = run(gateway, NOTHING);
    assert!(report.is_safe());
    let named: Vec<(String, String, String)> = report
        .warnings
        .iter()
        .map(|w| {
            assert_eq!(w.code, "outside-pod-spec");
            let o = w.object.as_ref().expect("the object named");
            (
                o.to_string(),
                w.site.clone().unwrap_or_default(),
                w.workload.as_ref().expect("the naming object").to_string(),
            )
        })
        .collect();
    assert_eq!(
        named,
        vec![
            (
                "ConfigMap/edge/ca".into(),
                "spec.validation.caCertificateRefs[0]".into(),
                "BackendTLSPolicy/edge/backend".into()
            ),
            (
                "Secret/edge/web-tls".into(),
                "spec.listeners[0].tls.certificateRefs[0]".into(),
                "Gateway/edge/gw".into()
            ),
            (
                "Secret/certs/api-tls".into(),
                "spec.listeners[0].tls.certificateRefs[1]".into(),
                "Gateway/edge/gw".into()
            ),
            (
                "Secret/edge/mesh-client".into(),
                "spec.tls.backend.clientCertificateRef".into(),
                "Gateway/edge/gw".into()
            ),
        ]
    );
}

#[test]
fn duplicate_objects_in_one_state_are_input_errors() {
    let twice = format!("{}\n---\n{}", cm("a", &["X"]), cm("a", &["Y"]));
    let input = CheckInput {
        current: load(&twice),
        ..Default::default()
    };
    let err = check(&input).unwrap_err().to_string();
    assert!(err.contains("ConfigMap") && err.contains("/a"), "{err}");
}
