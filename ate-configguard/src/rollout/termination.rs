//! `prestop` and `grace-budget`: a serving pod leaves the load balancer
//! before it stops, and the kubelet waits long enough for it to do so and
//! to finish what is in flight.

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use super::RolloutOptions;
use super::endpoint::normal_path;
use super::units::Unit;
use crate::error::InputError;
use crate::model::{Code, Finding, Severity};

/// The annotation that states a drain wait the manifest does not show.
pub(super) const DRAIN_ANNOTATION: &str = "ate.dev/drain-timeout-seconds";
/// The annotation that states how long a preStop hook takes where the
/// gate cannot read it from the hook.
pub(super) const PRESTOP_ANNOTATION: &str = "ate.dev/prestop-seconds";

/// What ate's `drain` subcommand sleeps without `--sleep`.
const DRAIN_DEFAULT_SLEEP: i64 = 15;

/// What `sleep infinity` counts as: longer than any grace period.
const FOREVER: i64 = i64::MAX / 4;

/// A preStop hook, as the gate reads it.
#[derive(Debug)]
enum Hook {
    /// No preStop hook.
    None,
    /// The native `sleep` action, or an `exec` whose time was read.
    Timed(i64),
    /// An `exec` whose time cannot be read.
    Untimed,
    /// An `httpGet` hook: the kubelet waits for its answer.
    Http { path: String, host: bool },
    /// Only `tcpSocket`, which the kubelet does not run as a hook.
    TcpOnly,
}

fn hook(c: &Container) -> Result<Hook, String> {
    let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else {
        return Ok(Hook::None);
    };
    let LifecycleHandler {
        exec,
        http_get,
        sleep,
        tcp_socket,
    } = h;
    if let Some(s) = sleep {
        return Ok(Hook::Timed(s.seconds.max(0)));
    }
    if let Some(e) = exec {
        let argv = e.command.clone().unwrap_or_default();
        return Ok(exec_seconds(&argv).map_or(Hook::Untimed, Hook::Timed));
    }
    if let Some(g) = http_get {
        return Ok(Hook::Http {
            path: normal_path(g.path.as_deref().unwrap_or("/")),
            host: g.host.as_deref().is_some_and(|h| !h.is_empty()),
        });
    }
    if tcp_socket.is_some() {
        return Ok(Hook::TcpOnly);
    }
    Err(format!(
        "container {}: lifecycle.preStop has no handler this gate knows (exec, httpGet, sleep): \
         an unknown hook form",
        c.name
    ))
}

/// Seconds `sleep`'s arguments ask for (GNU sleep sums them; `s`, `m`,
/// `h`, `d` suffixes; fractions round up), or `None` if one is not a time.
fn sleep_seconds<'a>(args: impl IntoIterator<Item = &'a str>) -> Option<i64> {
    let mut total: i64 = 0;
    let mut any = false;
    for a in args {
        any = true;
        if a == "infinity" {
            return Some(FOREVER);
        }
        let (number, unit) = match a.char_indices().last() {
            Some((i, u @ ('s' | 'm' | 'h' | 'd'))) => (&a[..i], u),
            _ => (a, 's'),
        };
        let n: f64 = number
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
        let scale = match unit {
            'm' => 60.0,
            'h' => 3600.0,
            'd' => 86_400.0,
            _ => 1.0,
        };
        total = total.saturating_add((n * scale).ceil().min(FOREVER as f64) as i64);
    }
    any.then_some(total)
}

/// The last path segment of a program.
fn program(arg: &str) -> &str {
    arg.rsplit('/').next().unwrap_or(arg)
}

/// Seconds an `exec` hook takes, where it can be read: `sleep N`, ate's
/// `drain [--sleep N]`, or a shell script (`sh -c '...'`) of `sleep`s and
/// commands that return at once.
fn exec_seconds(argv: &[String]) -> Option<i64> {
    let first = program(argv.first()?);
    if first == "sleep" {
        return sleep_seconds(argv[1..].iter().map(String::as_str));
    }
    if argv.get(1).map(String::as_str) == Some("drain") {
        let mut args = argv[2..].iter();
        while let Some(a) = args.next() {
            if a == "--sleep" {
                return args.next()?.parse().ok();
            }
            if let Some(n) = a.strip_prefix("--sleep=") {
                return n.parse().ok();
            }
        }
        return Some(DRAIN_DEFAULT_SLEEP);
    }
    if matches!(first, "sh" | "bash" | "dash" | "ash" | "zsh" | "busybox") {
        let at = argv.iter().position(|a| a == "-c")?;
        return script_seconds(argv.get(at + 1)?);
    }
    None
}

/// Seconds a shell script of `sleep`s and quick commands takes.
fn script_seconds(script: &str) -> Option<i64> {
    let mut total: i64 = 0;
    for command in script.split([';', '\n', '&', '|']) {
        let words: Vec<&str> = command
            .split_whitespace()
            .map(|w| w.trim_matches(['"', '\'']))
            .filter(|w| !w.is_empty())
            .collect();
        let words = match words.first() {
            Some(&"exec") => &words[1..],
            _ => &words[..],
        };
        match words.first().map(|w| program(w)) {
            None => {}
            Some("sleep") => {
                total = total.saturating_add(sleep_seconds(words[1..].iter().copied())?)
            }
            Some("true" | ":" | "echo" | "printf" | "exit" | "kill" | "killall" | "pkill") => {}
            Some(_) => return None,
        }
    }
    Some(total)
}

/// The drain wait of `c`: `Ok(Some(seconds))` where the manifest states
/// it, `Ok(None)` where only a ConfigMap or Secret (or a field) could hold
/// it, `Ok(Some(0))` where nothing sets it.
fn drain_wait(unit: &Unit<'_>, c: &Container, env_name: &str) -> Result<Option<i64>, InputError> {
    let stated = match unit.annotation(DRAIN_ANNOTATION) {
        None => None,
        Some(v) => Some(seconds_annotation(unit, DRAIN_ANNOTATION, v)?),
    };
    let var = c.env.iter().flatten().rev().find(|e| e.name == env_name);
    let literal = match var {
        Some(e) if e.value_from.is_none() => e
            .value
            .as_deref()
            .map(|v| v.trim().parse::<i64>().ok().filter(|n| *n >= 0)),
        _ => None,
    };
    Ok(match (var, literal, stated) {
        (_, Some(Some(n)), s) => Some(n.max(s.unwrap_or(0))),
        (_, _, Some(s)) => Some(s),
        // Set, but not to a number the gate reads, or from elsewhere.
        (Some(_), _, None) => None,
        (None, _, None) if c.env_from.as_ref().is_some_and(|f| !f.is_empty()) => None,
        (None, _, None) => Some(0),
    })
}

/// A whole number of seconds in an annotation; another value is unusable
/// input (the gate's own setting, misspelt).
fn seconds_annotation(unit: &Unit<'_>, name: &str, value: &str) -> Result<i64, InputError> {
    value
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            unit.invalid(format!(
                "annotation {name} must be a whole number of seconds, 0 or more"
            ))
        })
}

/// The preStop and grace-budget rules for `unit`.
pub(super) fn check(
    unit: &Unit<'_>,
    options: &RolloutOptions,
    out: &mut Vec<Finding>,
) -> Result<(), InputError> {
    let grace = unit.grace();
    if grace < 0 {
        return Err(unit.invalid(format!(
            "terminationGracePeriodSeconds {grace} is negative: the API server refuses it"
        )));
    }
    let serving: Vec<&str> = unit.serving().iter().map(|c| c.name.as_str()).collect();
    for c in unit.containers() {
        let hook = hook(c).map_err(|m| unit.invalid(m))?;
        let name = Some(c.name.as_str());
        let fail = |message: String| {
            unit.finding(
                Code::Prestop,
                Severity::Failure,
                name,
                Some("lifecycle.preStop".into()),
                message,
            )
        };
        if serving.contains(&c.name.as_str()) {
            match &hook {
                Hook::None => out.push(fail(
                    "a Service sends it traffic and it has no preStop hook, so SIGTERM races \
                     its removal from the endpoints (the classic 502s); add `exec: [APP, \
                     drain, --sleep, N]` or `sleep: {seconds: N}`"
                        .into(),
                )),
                Hook::TcpOnly => out.push(fail(
                    "its preStop hook is tcpSocket, which the kubelet does not run as a hook: \
                     there is no preStop; use exec or sleep"
                        .into(),
                )),
                Hook::Http { host: true, .. } => out.push(fail(
                    "its httpGet preStop sets `host`, which Pod Security baseline refuses from \
                     Kubernetes 1.34 and which sends the request away from the pod; use exec \
                     of the service's `drain`"
                        .into(),
                )),
                Hook::Http { path, .. } if path.contains("drain") => out.push(fail(format!(
                    "its httpGet preStop GETs {path}, but the kubelet sends it from the node and \
                     a drain endpoint answers only loopback (with its secret, by POST); use \
                     exec of the service's `drain` subcommand"
                ))),
                _ => {}
            }
        }
        let stated_prestop = match unit.annotation(PRESTOP_ANNOTATION) {
            None => None,
            Some(v) => Some(seconds_annotation(unit, PRESTOP_ANNOTATION, v)?),
        };
        let prestop = match &hook {
            Hook::None | Hook::TcpOnly => Some(0),
            Hook::Timed(n) => Some(*n),
            Hook::Untimed | Hook::Http { .. } => stated_prestop,
        };
        let drain = drain_wait(unit, c, &options.drain_timeout_env)?;
        // No hook: a drain wait alone is checked where the manifest states
        // one; where it cannot be read, nothing says this container drains.
        if matches!(hook, Hook::None | Hook::TcpOnly) && drain.is_none_or(|d| d == 0) {
            continue;
        }
        let unknown =
            |what: String| {
                unit.finding(Code::GraceBudget, Severity::Warning, name, None, format!(
                "budget unknown: whether terminationGracePeriodSeconds ({grace} s) covers the \
                 drain cannot be told: {what}"
            ))
            };
        match (prestop, drain) {
            (None, _) => out.push(unknown(format!(
                "the preStop hook's time cannot be read from it; state it in the annotation \
                 {PRESTOP_ANNOTATION}"
            ))),
            (_, None) => out.push(unknown(format!(
                "{} is not a literal in the container's env (a ConfigMap, a Secret or envFrom \
                 may set it); state the drain wait in the annotation {DRAIN_ANNOTATION}",
                options.drain_timeout_env
            ))),
            (Some(p), Some(d)) => {
                let need = p.saturating_add(d).saturating_add(options.grace_margin);
                if need > grace {
                    out.push(unit.finding(
                        Code::GraceBudget,
                        Severity::Failure,
                        name,
                        None,
                        format!(
                            "terminationGracePeriodSeconds {grace} is under preStop {p} s + drain \
                             wait {d} s + margin {} s, so the kubelet SIGKILLs requests still \
                             in flight; set it to at least {need}",
                            options.grace_margin
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{exec_seconds, script_seconds, sleep_seconds};

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn hook_times_are_read_from_every_working_form() {
        assert_eq!(exec_seconds(&argv(&["sleep", "15"])), Some(15));
        assert_eq!(exec_seconds(&argv(&["/bin/sleep", "1m", "5"])), Some(65));
        assert_eq!(
            exec_seconds(&argv(&["/app/svc", "drain", "--sleep", "9"])),
            Some(9)
        );
        assert_eq!(
            exec_seconds(&argv(&["/app/svc", "drain", "--sleep=7"])),
            Some(7)
        );
        assert_eq!(exec_seconds(&argv(&["/app/svc", "drain"])), Some(15));
        assert_eq!(
            exec_seconds(&argv(&["sh", "-c", "sleep 10 && nginx -s quit"])),
            None
        );
        assert_eq!(
            exec_seconds(&argv(&["/bin/sh", "-c", "echo bye; sleep 10"])),
            Some(10)
        );
        assert_eq!(exec_seconds(&argv(&["/usr/bin/curl", "localhost"])), None);
        assert_eq!(sleep_seconds(["0.5"]), Some(1));
        assert_eq!(sleep_seconds(["x"]), None);
        assert!(sleep_seconds(["infinity"]).unwrap() > 1_000_000_000);
        assert_eq!(script_seconds("sleep 5; sleep 5"), Some(10));
    }
}
