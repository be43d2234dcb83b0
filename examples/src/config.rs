//! Service configuration from the environment. Invalid values are startup
//! errors that name the variable and the value.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use ate_ratelimit::http::{ClientIp, TrustedProxies};
use ate_ratelimit::{
    Fallback,
    config::{LimitTable, parse_positive},
};
use ate_readiness::AdmissionPolicy;

/// Limit names as reported in 429 bodies and metrics.
pub const NOTIFICATIONS: &str = "notifications";
/// The prompt-bridge limit.
pub const PROMPT: &str = "prompt";
/// The shared request bucket.
pub const REQUESTS: &str = "requests";
/// The capability of the routes that need the provider (`/prompt`).
pub const PROMPT_BRIDGE: &str = "prompt-bridge";
/// The capability of the notification route (`/notify`).
pub const CLIENT_NOTIFICATIONS: &str = "client-notifications";
/// The `/invoke` limit's name: fresh idempotency keys per caller, each a
/// ledger record kept for its retention.
pub const INVOKE: &str = "invoke";

/// Everything the service reads at startup.
#[derive(Debug, Clone)]
pub struct Config {
    /// Rate limits (defaults: notifications 150/min, prompt 120/min, shared
    /// bucket 600/min), from `ATE_NOTIFICATIONS_PER_MIN`,
    /// `ATE_PROMPT_PER_MIN`, `ATE_REQUEST_BUCKET_PER_MIN`.
    pub limits: LimitTable,
    /// The bound on the in-flight wait at shutdown
    /// (`ATE_DRAIN_TIMEOUT_SECS`, default 20).
    pub drain_timeout: Duration,
    /// What admission does with requests that arrive while draining
    /// (`ATE_ADMISSION_POLICY`): `lame-duck` (default) serves them with
    /// `Connection: close`; `strict` refuses them, 503 with `Retry-After:
    /// 5`.
    pub admission: AdmissionPolicy,
    /// How long `/ready` keeps answering 200 once the drain has begun
    /// (`ATE_READY_WHILE_DRAINING_SECS`, default 0: 503 at once, for a load
    /// balancer that follows `/ready`; a few seconds under kube-proxy
    /// alone, whose fallback to terminating-but-serving endpoints needs
    /// the pod still ready).
    pub ready_while_draining: Duration,
    /// The bearer token for control-plane writes (`ATE_CONTROL_TOKEN`);
    /// unset: every external observed write is refused.
    pub control_token: Option<String>,
    /// The reconciler's period (`ATE_RECONCILE_INTERVAL_MS`, default 500;
    /// 0 disables the background reconciler).
    pub reconcile_interval: Option<Duration>,
    /// The most callers each rate limit keeps windows for
    /// (`ATE_MAX_CALLERS`, default 100,000). Past it, a new caller gets 503
    /// until a caller's window drains, instead of the table growing under
    /// a flood of made-up caller names.
    pub max_callers: usize,
    /// A PostgreSQL connection string for a ledger every replica shares
    /// (`ATE_LEDGER_POSTGRES_URL`); unset: the ledger is a redb file in
    /// the data dir, which only this process uses.
    pub ledger_postgres_url: Option<String>,
    /// Connections to that database (`ATE_LEDGER_POSTGRES_CONNECTIONS`,
    /// default 4): concurrent `/invoke` calls run on as many at once.
    pub ledger_postgres_connections: NonZeroUsize,
    /// How long a ledger lease lasts (`ATE_LEDGER_LEASE_SECS`, default 30):
    /// a call in flight renews its lease every third of it, so a call that
    /// takes longer keeps it; a worker that died loses it after this long,
    /// and a retry then resolves the attempt by the dispatch rule.
    pub ledger_lease: Duration,
    /// This worker's name on the ledger's leases (`ATE_WORKER_ID`, default
    /// `HOSTNAME/pid-PID`). Unique among live workers and kept across
    /// restarts (a pod's name), it lets a restarted worker resolve the
    /// attempts its previous run left open at once, on a shared ledger too.
    pub worker_id: String,
    /// Where the rate-limit audit trail (and, without a PostgreSQL ledger,
    /// the ledger) lives.
    pub data_dir: PathBuf,
    /// A Redis every replica shares for the rate limits
    /// (`ATE_RATELIMIT_REDIS_URL`, say `redis://127.0.0.1:6379/0`); unset:
    /// each process keeps its own windows.
    pub ratelimit_redis_url: Option<String>,
    /// A Redis Cluster every replica shares for the rate limits instead
    /// (`ATE_RATELIMIT_REDIS_CLUSTER`, comma-separated seed nodes, say
    /// `redis://10.0.0.1:6379,redis://10.0.0.2:6379`).
    pub ratelimit_redis_cluster: Option<Vec<String>>,
    /// What the limits do while that Redis cannot answer
    /// (`ATE_RATELIMIT_REDIS_FALLBACK`): `local` (default) decides with
    /// this process's own windows; `refuse` answers 503 with
    /// `Retry-After`.
    pub ratelimit_redis_fallback: Fallback,
    /// Where a caller without `X-Caller` is keyed from: the load balancers
    /// and proxies in front (`ATE_TRUSTED_PROXIES`, comma-separated CIDRs;
    /// default none), the header they write the client address in
    /// (`ATE_CLIENT_IP_SOURCE`: `peer`, `x-forwarded-for`, `forwarded`, or
    /// a single-address header such as `x-real-ip`; default
    /// `x-forwarded-for` when proxies are trusted, else `peer`), and the
    /// IPv6 prefix callers are keyed by (`ATE_CLIENT_IPV6_PREFIX`, default
    /// 64; 128 keys each address alone).
    pub client_ip: ClientIp,
    /// Limits in shadow mode (`ATE_RATELIMIT_SHADOW`, comma-separated
    /// limit names: `notifications` (or `notify`), `prompt`, `requests`):
    /// they count, report and show in `/metrics` (`result="shadow_denied"`)
    /// but never refuse, so a new limit is watched before it bites.
    pub ratelimit_shadow: Vec<&'static str>,
    /// The provider `/invoke` calls over HTTP (`ATE_PROVIDER_URL`, say
    /// `http://127.0.0.1:9000/charge`); unset: the simulated provider.
    pub provider_url: Option<crate::provider::ProviderUrl>,
    /// The bound on one provider call (`ATE_PROVIDER_TIMEOUT_MS`, default
    /// 5,000): to connect, and from the request to the whole answer.
    pub provider_timeout: Duration,
    /// Where the drain endpoint's secret is written at start
    /// (`ATE_DRAIN_TOKEN_FILE`); unset: `ate-drain-PORT.token` in the
    /// system's temporary directory. The `drain` subcommand reads the same
    /// variable, so set it in the container's environment, not in `args`.
    pub drain_token_file: Option<PathBuf>,
    /// How long a connection may wait for a request's head, the first or
    /// the next on a kept-alive connection (`ATE_HTTP_IDLE_TIMEOUT_SECS`,
    /// default 75); then it is closed. Keep it above the load balancer's
    /// own idle timeout (AWS ALB: 60 s), so the balancer closes an idle
    /// connection first and never sends a request on one being closed.
    pub http_idle_timeout: Duration,
    /// How many objects `PUT /objects` may hold in all
    /// (`ATE_MAX_OBJECTS`, default 10,000), and one caller may create
    /// (`ATE_MAX_OBJECTS_PER_CALLER`, default 100).
    pub max_objects: usize,
    /// See [`max_objects`](Self::max_objects).
    pub max_objects_per_caller: usize,
    /// The bytes all objects' specs and statuses may take together
    /// (`ATE_MAX_OBJECT_BYTES`, default 64 MiB).
    pub max_object_bytes: usize,
    /// How many WebSocket sessions may be open at once
    /// (`ATE_MAX_WS_SESSIONS`, default 64; each may buffer a message of
    /// up to 1 MiB).
    pub max_ws_sessions: usize,
    /// How long a WebSocket session may go without a message from its
    /// client before it is closed with 1001 (`ATE_WS_IDLE_TIMEOUT_SECS`,
    /// default 60).
    pub ws_idle_timeout: Duration,
    /// The provider's health endpoint the service asks for its
    /// `prompt-bridge` capability (`ATE_PROVIDER_HEALTH_PATH`, default
    /// `/health`, on `ATE_PROVIDER_URL`'s host).
    pub provider_health_path: String,
    /// How often it is asked (`ATE_PROVIDER_HEALTH_INTERVAL_MS`, default
    /// 2,000): a provider that answers again is served again within it.
    pub provider_health_interval: Duration,
}

/// A startup error.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A bad limit or number.
    #[error(transparent)]
    Limit(#[from] ate_ratelimit::Error),
    /// Something else.
    #[error("{0}")]
    Other(String),
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// The service's limit table (the example defaults from the original
/// system; they live here, not in the library).
pub fn limit_table() -> LimitTable {
    LimitTable::new()
        .limit(NOTIFICATIONS, "ATE_NOTIFICATIONS_PER_MIN", nz(150))
        .limit(PROMPT, "ATE_PROMPT_PER_MIN", nz(120))
        .limit(REQUESTS, "ATE_REQUEST_BUCKET_PER_MIN", nz(600))
        .limit(INVOKE, "ATE_INVOKE_PER_MIN", nz(120))
}

/// `ATE_DRAIN_TIMEOUT_SECS` and its default.
const DRAIN_TIMEOUT_SECS: (&str, u32) = ("ATE_DRAIN_TIMEOUT_SECS", 20);
/// `ATE_RECONCILE_INTERVAL_MS` and its default (0: off).
const RECONCILE_INTERVAL_MS: (&str, u32) = ("ATE_RECONCILE_INTERVAL_MS", 500);
/// `ATE_MAX_CALLERS` and its default.
const MAX_CALLERS: (&str, u32) = ("ATE_MAX_CALLERS", 100_000);
/// `ATE_LEDGER_POSTGRES_CONNECTIONS` and its default.
const POSTGRES_CONNECTIONS: (&str, u32) = ("ATE_LEDGER_POSTGRES_CONNECTIONS", 4);

/// The most ledger connections a replica may ask for: each is a server
/// process on the database, whose `max_connections` is 100 by default;
/// a bigger pool is a typo, not a plan.
const MAX_POSTGRES_CONNECTIONS: u32 = 1_024;
/// `ATE_LEDGER_LEASE_SECS` and its default.
const LEASE_SECS: (&str, u32) = ("ATE_LEDGER_LEASE_SECS", 30);
/// `ATE_READY_WHILE_DRAINING_SECS` and its default.
const READY_WHILE_DRAINING_SECS: (&str, u32) = ("ATE_READY_WHILE_DRAINING_SECS", 0);
/// `ATE_PROVIDER_TIMEOUT_MS` and its default.
const PROVIDER_TIMEOUT_MS: (&str, u32) = ("ATE_PROVIDER_TIMEOUT_MS", 5_000);
/// `ATE_HTTP_IDLE_TIMEOUT_SECS` and its default.
const HTTP_IDLE_TIMEOUT_SECS: (&str, u32) = ("ATE_HTTP_IDLE_TIMEOUT_SECS", 75);
/// `ATE_MAX_OBJECTS` and its default.
const MAX_OBJECTS: (&str, u32) = ("ATE_MAX_OBJECTS", 10_000);
/// `ATE_MAX_OBJECTS_PER_CALLER` and its default.
const MAX_OBJECTS_PER_CALLER: (&str, u32) = ("ATE_MAX_OBJECTS_PER_CALLER", 100);
/// `ATE_MAX_OBJECT_BYTES` and its default.
const MAX_OBJECT_BYTES: (&str, u32) = ("ATE_MAX_OBJECT_BYTES", 64 << 20);
/// `ATE_MAX_WS_SESSIONS` and its default.
const MAX_WS_SESSIONS: (&str, u32) = ("ATE_MAX_WS_SESSIONS", 64);
/// `ATE_WS_IDLE_TIMEOUT_SECS` and its default.
const WS_IDLE_TIMEOUT_SECS: (&str, u32) = ("ATE_WS_IDLE_TIMEOUT_SECS", 60);
/// `ATE_PROVIDER_HEALTH_INTERVAL_MS` and its default.
const PROVIDER_HEALTH_INTERVAL_MS: (&str, u32) = ("ATE_PROVIDER_HEALTH_INTERVAL_MS", 2_000);
/// `ATE_ADMISSION_POLICY` and its default.
const ADMISSION_POLICY: (&str, &str) = ("ATE_ADMISSION_POLICY", "lame-duck");

/// Every setting a ConfigMap holds (`examples/k8s/config.yaml`), with the
/// default compiled in here, as the environment spells it: the limits
/// table, the numbers and the admission policy (not the secrets, and not
/// `ATE_WORKER_ID`, which is each pod's own). `ate-configguard drift`
/// checks that the ConfigMap says the same (the binaries print it with
/// their `defaults` subcommand).
pub fn defaults() -> std::collections::BTreeMap<String, String> {
    let limits = limit_table();
    let limits = limits
        .specs()
        .iter()
        .filter_map(|s| Some((s.env.clone()?, s.limit.to_string())));
    let numbers = [
        DRAIN_TIMEOUT_SECS,
        RECONCILE_INTERVAL_MS,
        MAX_CALLERS,
        POSTGRES_CONNECTIONS,
        LEASE_SECS,
        PROVIDER_TIMEOUT_MS,
        READY_WHILE_DRAINING_SECS,
        HTTP_IDLE_TIMEOUT_SECS,
        MAX_OBJECTS,
        MAX_OBJECTS_PER_CALLER,
        MAX_OBJECT_BYTES,
        MAX_WS_SESSIONS,
        WS_IDLE_TIMEOUT_SECS,
        PROVIDER_HEALTH_INTERVAL_MS,
    ]
    .map(|(var, value)| (var.to_owned(), value.to_string()));
    let policy = (ADMISSION_POLICY.0.to_owned(), ADMISSION_POLICY.1.to_owned());
    limits.chain(numbers).chain([policy]).collect()
}

fn env_number(var: &str, default: u32, allow_zero: bool) -> Result<u32, ConfigError> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(std::env::VarError::NotUnicode(v)) => Err(ConfigError::Other(format!(
            "invalid value {v:?} for {var}: not valid UTF-8"
        ))),
        Ok(v) if allow_zero && v == "0" => Ok(0),
        Ok(v) => Ok(parse_positive(var, &v)?.get()),
    }
}

/// `ATE_DRAIN_TOKEN_FILE`: where the drain secret lives (unset: the
/// default path for the port).
pub fn drain_token_file() -> Result<Option<PathBuf>, ConfigError> {
    Ok(env_text(
        "ATE_DRAIN_TOKEN_FILE",
        "for ate-drain-PORT.token in the temporary directory",
    )?
    .map(PathBuf::from))
}

/// An optional text variable: unset is `None`; set, it must be valid UTF-8
/// and not blank (`unset_hint` says what leaving it unset does).
fn env_text(var: &str, unset_hint: &str) -> Result<Option<String>, ConfigError> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::Other(format!(
            "invalid value for {var}: not valid UTF-8"
        ))),
        Ok(v) if v.trim().is_empty() => Err(ConfigError::Other(format!(
            "invalid value for {var}: empty (unset it {unset_hint})"
        ))),
        Ok(v) => Ok(Some(v)),
    }
}

/// `ATE_ADMISSION_POLICY`: `lame-duck` (unset: the default) or `strict`.
fn admission_policy() -> Result<AdmissionPolicy, ConfigError> {
    let (var, default) = ADMISSION_POLICY;
    match env_text(var, "for lame-duck")?
        .as_deref()
        .unwrap_or(default)
    {
        "lame-duck" => Ok(AdmissionPolicy::LameDuck),
        "strict" => Ok(AdmissionPolicy::Strict {
            retry_after_secs: STRICT_RETRY_AFTER_SECS,
        }),
        other => Err(ConfigError::Other(format!(
            "invalid value {other:?} for {var}: must be lame-duck or strict"
        ))),
    }
}

/// `ATE_RATELIMIT_REDIS_CLUSTER`: comma-separated `redis://` or
/// `rediss://` seed nodes (unset: no cluster).
fn redis_cluster() -> Result<Option<Vec<String>>, ConfigError> {
    let var = "ATE_RATELIMIT_REDIS_CLUSTER";
    let Some(text) = env_text(var, "for no cluster")? else {
        return Ok(None);
    };
    let nodes: Vec<String> = text.split(',').map(|n| n.trim().to_owned()).collect();
    for node in &nodes {
        if !(node.starts_with("redis://") || node.starts_with("rediss://"))
            || node.len() <= "rediss://".len()
        {
            return Err(ConfigError::Other(format!(
                "invalid seed node {:?} in {var}: each must be a redis:// or rediss:// URL",
                redact_url(node)
            )));
        }
    }
    Ok(Some(nodes))
}

/// `ATE_RATELIMIT_REDIS_FALLBACK`: `local` (unset: the default) or
/// `refuse`.
fn redis_fallback() -> Result<Fallback, ConfigError> {
    let var = "ATE_RATELIMIT_REDIS_FALLBACK";
    match env_text(var, "for local")?.as_deref().unwrap_or("local") {
        "local" => Ok(Fallback::Local),
        "refuse" => Ok(Fallback::Refuse),
        other => Err(ConfigError::Other(format!(
            "invalid value {other:?} for {var}: must be local or refuse"
        ))),
    }
}

/// `ATE_TRUSTED_PROXIES`: comma-separated CIDRs or addresses (unset: none).
fn trusted_proxies() -> Result<TrustedProxies, ConfigError> {
    let var = "ATE_TRUSTED_PROXIES";
    let Some(list) = env_text(var, "to trust no proxy")? else {
        return Ok(TrustedProxies::none());
    };
    TrustedProxies::parse(&list)
        .map_err(|e| ConfigError::Other(format!("invalid value {list:?} for {var}: {e}")))
}

/// `ATE_RATELIMIT_SHADOW`: the limits in shadow mode, by name.
fn ratelimit_shadow() -> Result<Vec<&'static str>, ConfigError> {
    let var = "ATE_RATELIMIT_SHADOW";
    let Some(list) = env_text(var, "to let every limit refuse")? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let name = match entry {
            "notify" | NOTIFICATIONS => NOTIFICATIONS,
            PROMPT => PROMPT,
            REQUESTS => REQUESTS,
            other => {
                return Err(ConfigError::Other(format!(
                    "invalid value {other:?} in {var}: the limits are {NOTIFICATIONS} (or \
                     notify), {PROMPT} and {REQUESTS}"
                )));
            }
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// `ATE_TRUSTED_PROXIES`, `ATE_CLIENT_IP_SOURCE` and
/// `ATE_CLIENT_IPV6_PREFIX`.
fn client_ip() -> Result<ClientIp, ConfigError> {
    let trusted = trusted_proxies()?;
    let var = "ATE_CLIENT_IP_SOURCE";
    let default = if trusted.is_empty() {
        "peer"
    } else {
        "x-forwarded-for"
    };
    let source = env_text(var, &format!("for {default}"))?;
    let source = source.as_deref().unwrap_or(default);
    let client_ip = ClientIp::parse(source, trusted)
        .map_err(|e| ConfigError::Other(format!("invalid value {source:?} for {var}: {e}")))?;
    let var = "ATE_CLIENT_IPV6_PREFIX";
    let bits = env_number(var, u32::from(ClientIp::DEFAULT_IPV6_PREFIX), false)?;
    u8::try_from(bits)
        .map_err(|_| ate_ratelimit::http::KeyError::BadPrefix { bits: u8::MAX })
        .and_then(|bits| client_ip.ipv6_prefix(bits))
        .map_err(|e| ConfigError::Other(format!("invalid value \"{bits}\" for {var}: {e}")))
}

/// `ATE_PROVIDER_URL`: an `http://` URL (unset: the simulated provider).
fn provider_url() -> Result<Option<crate::provider::ProviderUrl>, ConfigError> {
    let var = "ATE_PROVIDER_URL";
    let Some(text) = env_text(var, "for the simulated provider")? else {
        return Ok(None);
    };
    crate::provider::ProviderUrl::parse(text.trim())
        .map(Some)
        .map_err(|e| {
            ConfigError::Other(format!(
                "invalid value {:?} for {var}: {e}",
                redact_url(&text)
            ))
        })
}

/// `text` with any user info (`user:password@`) of its authority shown as
/// `***@`, whatever its scheme (a misspelt one too), for error messages
/// and logs: a URL's credentials are never printed.
pub fn redact_url(text: &str) -> String {
    let (scheme, rest) = match text.find("://") {
        Some(i) => text.split_at(i + 3),
        None => ("", text),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}***{}", &rest[at..]),
        None => text.to_owned(),
    }
}

/// The `Retry-After` of a request refused while draining under the strict
/// policy: by then the load balancer has mostly moved on, so a retry lands
/// on another pod.
pub const STRICT_RETRY_AFTER_SECS: u64 = 5;

impl Config {
    /// Reads the environment; `data_dir` comes from the command line.
    pub fn from_env(data_dir: PathBuf) -> Result<Self, ConfigError> {
        let limits = limit_table();
        // Resolve now so a bad value stops the service at startup.
        limits.resolve_env()?;
        let number = |(var, default): (&str, u32), allow_zero| env_number(var, default, allow_zero);
        let drain = number(DRAIN_TIMEOUT_SECS, true)?;
        let ready_while_draining = number(READY_WHILE_DRAINING_SECS, true)?;
        let reconcile = number(RECONCILE_INTERVAL_MS, true)?;
        let max_callers = number(MAX_CALLERS, false)?;
        let admission = admission_policy()?;
        let control_token = env_text("ATE_CONTROL_TOKEN", "to disable control-plane writes")?;
        let ledger_postgres_connections = number(POSTGRES_CONNECTIONS, false)?;
        let most = MAX_POSTGRES_CONNECTIONS;
        if ledger_postgres_connections > most {
            return Err(ConfigError::Other(format!(
                "invalid value \"{ledger_postgres_connections}\" for {}: at most {most} \
                 (one database connection each)",
                POSTGRES_CONNECTIONS.0
            )));
        }
        let ledger_postgres_url = env_text(
            "ATE_LEDGER_POSTGRES_URL",
            "to keep the ledger in the data dir",
        )?;
        let ledger_lease = number(LEASE_SECS, false)?;
        let ratelimit_redis_url = env_text(
            "ATE_RATELIMIT_REDIS_URL",
            "to keep the rate limits in each process",
        )?;
        let ratelimit_redis_cluster = redis_cluster()?;
        if ratelimit_redis_url.is_some() && ratelimit_redis_cluster.is_some() {
            return Err(ConfigError::Other(
                "ATE_RATELIMIT_REDIS_URL and ATE_RATELIMIT_REDIS_CLUSTER are both set: \
                 set one (a single Redis, or a cluster's seed nodes)"
                    .into(),
            ));
        }
        let ratelimit_redis_fallback = redis_fallback()?;
        let client_ip = client_ip()?;
        let ratelimit_shadow = ratelimit_shadow()?;
        let provider_url = provider_url()?;
        let provider_timeout = number(PROVIDER_TIMEOUT_MS, false)?;
        let drain_token_file = drain_token_file()?;
        let http_idle = number(HTTP_IDLE_TIMEOUT_SECS, false)?;
        let size = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        let max_objects = size(number(MAX_OBJECTS, false)?);
        let max_objects_per_caller = size(number(MAX_OBJECTS_PER_CALLER, false)?);
        let max_object_bytes = size(number(MAX_OBJECT_BYTES, false)?);
        let max_ws_sessions = size(number(MAX_WS_SESSIONS, false)?);
        let ws_idle = number(WS_IDLE_TIMEOUT_SECS, false)?;
        let provider_health_interval = number(PROVIDER_HEALTH_INTERVAL_MS, false)?;
        let provider_health_path = env_text("ATE_PROVIDER_HEALTH_PATH", "for /health")?
            .unwrap_or_else(|| "/health".into());
        if !provider_health_path.starts_with('/')
            || !provider_health_path.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(ConfigError::Other(format!(
                "invalid value {provider_health_path:?} for ATE_PROVIDER_HEALTH_PATH: a path \
                 starting with / in visible ASCII"
            )));
        }
        // Pods all run as PID 1: the pod's name tells replicas apart.
        let worker_id = env_text("ATE_WORKER_ID", "for HOSTNAME/pid-PID")?.unwrap_or_else(|| {
            format!(
                "{}/pid-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
                std::process::id()
            )
        });
        Ok(Self {
            limits,
            drain_timeout: Duration::from_secs(drain.into()),
            admission,
            ready_while_draining: Duration::from_secs(ready_while_draining.into()),
            control_token,
            reconcile_interval: (reconcile > 0).then(|| Duration::from_millis(reconcile.into())),
            max_callers: usize::try_from(max_callers).unwrap_or(usize::MAX),
            ledger_postgres_url,
            ledger_postgres_connections: usize::try_from(ledger_postgres_connections)
                .ok()
                .and_then(NonZeroUsize::new)
                .unwrap_or(NonZeroUsize::MIN),
            ledger_lease: Duration::from_secs(ledger_lease.into()),
            worker_id,
            data_dir,
            ratelimit_redis_url,
            ratelimit_redis_cluster,
            ratelimit_redis_fallback,
            client_ip,
            ratelimit_shadow,
            provider_url,
            provider_timeout: Duration::from_millis(provider_timeout.into()),
            drain_token_file,
            http_idle_timeout: Duration::from_secs(http_idle.into()),
            max_objects,
            max_objects_per_caller,
            max_object_bytes,
            max_ws_sessions,
            ws_idle_timeout: Duration::from_secs(ws_idle.into()),
            provider_health_path,
            provider_health_interval: Duration::from_millis(provider_health_interval.into()),
        })
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact_url;

    #[test]
    fn user_info_never_survives_whatever_the_scheme() {
        for (url, shown) in [
            ("http://user:pw@p:9000/x", "http://***@p:9000/x"),
            ("rdis://:s3cret@cache:6379", "rdis://***@cache:6379"),
            ("token@cache:6379/0", "***@cache:6379/0"),
            ("http://p/x?a=b@c", "http://p/x?a=b@c"),
            ("http://a:b@c@d/x", "http://***@d/x"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
