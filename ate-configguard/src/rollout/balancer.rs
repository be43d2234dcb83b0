//! `lb-drain`: a load balancer in front of a Service stops sending to a
//! pod (and stops draining it) within the pod's lifetime, and health-checks
//! the endpoint that says it drains.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;

use super::endpoint::normal_path;
use super::fleet::BackendConfig;
use super::units::Unit;
use crate::error::InputError;
use crate::model::{Code, Finding, Severity};

const GKE_BACKEND_CONFIG: [&str; 2] = [
    "cloud.google.com/backend-config",
    "beta.cloud.google.com/backend-config",
];
const AWS_CLB_DRAINING: &str =
    "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout";
const AWS_TARGET_GROUP: [&str; 2] = [
    "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes",
    "alb.ingress.kubernetes.io/target-group-attributes",
];
const ALB_HEALTH_PATH: &str = "alb.ingress.kubernetes.io/healthcheck-path";

/// What one load-balancer setting asks of the workloads behind it.
struct Setting {
    /// Where it is set, for the finding (`Service/web annotation ...`).
    site: String,
    /// Seconds it keeps draining a backend.
    draining: Option<i64>,
    /// The path it health-checks.
    health_path: Option<String>,
}

fn invalid(what: &str, message: String) -> InputError {
    InputError::Invalid {
        at: what.to_owned(),
        message,
    }
}

fn annotations(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> BTreeMap<&str, &str> {
    meta.annotations
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// `deregistration_delay.timeout_seconds=N` in an AWS target-group
/// attribute list (`k=v,k=v`).
fn deregistration_delay(list: &str, what: &str) -> Result<Option<i64>, InputError> {
    for pair in list.split(',') {
        if let Some((k, v)) = pair.split_once('=')
            && k.trim() == "deregistration_delay.timeout_seconds"
        {
            return v
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .map(Some)
                .ok_or_else(|| {
                    invalid(
                        what,
                        "deregistration_delay.timeout_seconds is not a whole number of seconds"
                            .into(),
                    )
                });
        }
    }
    Ok(None)
}

/// The settings a Service's own annotations and the BackendConfigs they
/// name make.
fn service_settings(
    service: &Service,
    backend_configs: &[&BackendConfig],
) -> Result<Vec<Setting>, InputError> {
    let name = service.metadata.name.as_deref().unwrap_or("");
    let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
    let what = format!("Service {namespace}/{name}");
    let a = annotations(&service.metadata);
    let mut out = Vec::new();
    for key in GKE_BACKEND_CONFIG {
        let Some(value) = a.get(key) else { continue };
        let parsed: serde_json::Value = serde_json::from_str(value).map_err(|_| {
            invalid(
                &what,
                format!("annotation {key} is not JSON (`{{\"default\": \"NAME\"}}`)"),
            )
        })?;
        let mut names: Vec<&str> = parsed
            .get("default")
            .and_then(|d| d.as_str())
            .into_iter()
            .collect();
        if let Some(ports) = parsed.get("ports").and_then(|p| p.as_object()) {
            names.extend(ports.values().filter_map(|v| v.as_str()));
        }
        if names.is_empty() {
            return Err(invalid(
                &what,
                format!("annotation {key} names no BackendConfig"),
            ));
        }
        for bc in backend_configs {
            if bc.namespace == namespace && names.contains(&bc.name.as_str()) {
                out.push(Setting {
                    site: format!("BackendConfig/{}", bc.name),
                    draining: bc.draining_timeout_sec,
                    health_path: bc.health_check_path.clone(),
                });
            }
        }
    }
    if let Some(v) = a.get(AWS_CLB_DRAINING) {
        let n = v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                invalid(
                    &what,
                    format!("annotation {AWS_CLB_DRAINING} is not a whole number of seconds"),
                )
            })?;
        out.push(Setting {
            site: format!("Service/{name} {AWS_CLB_DRAINING}"),
            draining: Some(n),
            health_path: None,
        });
    }
    for key in AWS_TARGET_GROUP {
        if let Some(v) = a.get(key) {
            out.push(Setting {
                site: format!("Service/{name} {key}"),
                draining: deregistration_delay(v, &what)?,
                health_path: None,
            });
        }
    }
    Ok(out)
}

/// The Services an Ingress sends to, with the settings its annotations
/// make.
fn ingress_settings(ingress: &Ingress) -> Result<(Vec<&str>, Vec<Setting>), InputError> {
    let name = ingress.metadata.name.as_deref().unwrap_or("");
    let what = format!(
        "Ingress {}/{name}",
        ingress.metadata.namespace.as_deref().unwrap_or("default")
    );
    let a = annotations(&ingress.metadata);
    let mut settings = Vec::new();
    let draining = match a.get(AWS_TARGET_GROUP[1]) {
        Some(v) => deregistration_delay(v, &what)?,
        None => None,
    };
    let health_path = a.get(ALB_HEALTH_PATH).map(|p| (*p).to_owned());
    if draining.is_some() || health_path.is_some() {
        settings.push(Setting {
            site: format!("Ingress/{name}"),
            draining,
            health_path,
        });
    }
    let spec = ingress.spec.as_ref();
    let services = spec
        .and_then(|s| s.default_backend.as_ref())
        .into_iter()
        .chain(
            spec.and_then(|s| s.rules.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|r| r.http.as_ref())
                .flat_map(|h| h.paths.iter().map(|p| &p.backend)),
        )
        .filter_map(|b| b.service.as_ref().map(|s| s.name.as_str()))
        .collect();
    Ok((services, settings))
}

/// Checks one setting against one workload behind it.
fn check_setting(unit: &Unit<'_>, setting: &Setting, out: &mut Vec<Finding>) {
    let grace = unit.grace();
    if let Some(d) = setting.draining
        && d > grace
    {
        out.push(unit.finding(
            Code::LbDrain,
            Severity::Failure,
            None,
            Some(setting.site.clone()),
            format!(
                "the load balancer keeps draining a pod for {d} s, but the pod is killed after \
                 terminationGracePeriodSeconds {grace} s, so connections it still drains are \
                 cut; lower the draining timeout to {grace} or raise the grace period"
            ),
        ));
    }
    let Some(path) = &setting.health_path else {
        return;
    };
    let path = normal_path(path);
    for c in unit.serving() {
        let http = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref()
                .and_then(|p| p.http_get.as_ref())
                .map(|h| normal_path(h.path.as_deref().unwrap_or("/")))
        };
        let Some(ready) = http(&c.readiness_probe) else {
            continue;
        };
        if path != ready {
            let liveness = http(&c.liveness_probe).is_some_and(|l| l == path);
            out.push(unit.finding(
                Code::LbDrain,
                Severity::Failure,
                Some(&c.name),
                Some(setting.site.clone()),
                format!(
                    "the load balancer health-checks {path}{}, not the readiness path {ready}, \
                     so it keeps sending to a pod that drains; check {ready}",
                    if liveness { " (the liveness path)" } else { "" }
                ),
            ));
        }
    }
}

/// The load-balancer rule for every workload behind a Service or Ingress
/// that sets how it drains or health-checks.
pub(super) fn check(
    units: &[Unit<'_>],
    services: &[&Service],
    ingresses: &[&Ingress],
    backend_configs: &[&BackendConfig],
    out: &mut Vec<Finding>,
) -> Result<(), InputError> {
    fn behind<'u, 'a>(
        units: &'u [Unit<'a>],
        service: &'u Service,
    ) -> impl Iterator<Item = &'u Unit<'a>> {
        units
            .iter()
            .filter(move |u| u.services.iter().any(|s| std::ptr::eq(*s, service)))
    }
    for service in services {
        for setting in service_settings(service, backend_configs)? {
            for unit in behind(units, service) {
                check_setting(unit, &setting, out);
            }
        }
    }
    for ingress in ingresses {
        let (names, settings) = ingress_settings(ingress)?;
        if settings.is_empty() {
            continue;
        }
        let namespace = ingress.metadata.namespace.as_deref().unwrap_or("default");
        for service in services.iter().filter(|s| {
            s.metadata.namespace.as_deref().unwrap_or("default") == namespace
                && names.contains(&s.metadata.name.as_deref().unwrap_or(""))
        }) {
            for setting in &settings {
                for unit in behind(units, service) {
                    check_setting(unit, setting, out);
                }
            }
        }
    }
    Ok(())
}
