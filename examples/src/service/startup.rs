//! Startup: what [`AppState::new`](super::AppState::new) opens before the
//! service takes traffic, each step failing with a [`ConfigError`] that
//! names what to fix: the data dir and its lock, the ledger (and its
//! recovery), the rate-limit audit trail, the shared limit store, and the
//! capabilities.

use std::sync::Arc;

use ate_ledger::{AsyncLedger, AsyncPgStore, RedbStore, clock::SystemClock};
use ate_ratelimit::{LimitId, LimitSet, Limits, MonotonicClock, RedisConfig};

use super::LedgerStore;
use crate::audit::Audit;
use crate::config::{self, Config, ConfigError};
use crate::metrics::Metrics;

/// Creates the data dir and takes its lock: a second process on it stops
/// here, before it touches the ledger file or the audit trail.
pub(super) fn lock_data_dir(config: &Config) -> Result<std::fs::File, ConfigError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        // create_dir_all's own error for a file in the way is "File
        // exists", which reads as if the directory were fine.
        let what = if config.data_dir.exists() && !config.data_dir.is_dir() {
            "it exists and is not a directory".to_owned()
        } else {
            e.to_string()
        };
        ConfigError::Other(format!(
            "cannot create data dir {}: {what}",
            config.data_dir.display()
        ))
    })?;
    // First, the data dir's lock: a second process on it stops here,
    // before it touches the ledger file or the audit trail.
    let lock_path = config.data_dir.join("lock");
    let data_dir_lock = std::fs::File::create(&lock_path)
        .map_err(|e| ConfigError::Other(format!("cannot create {}: {e}", lock_path.display())))?;
    data_dir_lock.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => ConfigError::Other(format!(
            "the data dir {} is already open by another process: is another service \
             running on it? Give each its own --data-dir",
            config.data_dir.display()
        )),
        std::fs::TryLockError::Error(e) => {
            ConfigError::Other(format!("cannot lock {}: {e}", lock_path.display()))
        }
    })?;
    Ok(data_dir_lock)
}

/// The ledger: on PostgreSQL when configured (shared by every replica),
/// else a redb file in the data dir (returned too, for its fault gauge),
/// with this run's startup recovery done.
pub(super) async fn open_ledger(
    config: &Config,
    metrics: &Metrics,
) -> Result<(AsyncLedger<LedgerStore>, Option<Arc<RedbStore>>), ConfigError> {
    let ledger_config = ate_ledger::Config {
        lease_ttl: config.ledger_lease,
        ..ate_ledger::Config::default()
    };
    let count = metrics.transitions();
    let ledger = |store: LedgerStore| {
        AsyncLedger::with_clock(store, ledger_config, SystemClock)
            .map(|ledger| ledger.observe(move |_, step| count(step.name())))
            .map_err(|e| ConfigError::Other(format!("ledger: {e}")))
    };
    // The redb store, when it is the ledger's, for its fault gauge.
    let mut redb = None;
    let ledger = match &config.ledger_postgres_url {
        // Shared by every replica: an attempt found open may belong to
        // a live replica, so only this worker's own (its previous run,
        // under the same ATE_WORKER_ID) and those whose lease expired
        // (their worker is gone) are resolved.
        Some(url) => {
            let store = AsyncPgStore::connect(url, config.ledger_postgres_connections.get())
                .await
                .map_err(|e| {
                    ConfigError::Other(format!(
                        "cannot open the ledger database (ATE_LEDGER_POSTGRES_URL): {e}"
                    ))
                })?;
            let ledger = ledger(Arc::new(store))?;
            recovered(ledger.recover_owner(&config.worker_id).await)?;
            tracing::info!(worker = %config.worker_id, "ledger: PostgreSQL, shared by every replica");
            ledger
        }
        // This process's own: every attempt still open was left by a run
        // that has ended (a crash, a SIGKILL), so resolve them all now
        // rather than keep their callers on 409 until the dead run's
        // leases expire.
        None => {
            let path = config.data_dir.join("ledger.redb");
            let store = RedbStore::open(&path).map_err(|e| match e {
                ate_ledger::Error::AlreadyOpen { .. } => ConfigError::Other(format!(
                    "the ledger {} is already open: is another service running on this \
                     data dir? Give each its own --data-dir",
                    path.display()
                )),
                e => ConfigError::Other(format!("cannot open ledger {}: {e}", path.display())),
            })?;
            let store = Arc::new(store);
            redb = Some(store.clone());
            let ledger = ledger(store)?;
            recovered(ledger.recover_all().await)?;
            ledger
        }
    };
    Ok((ledger, redb))
}

/// The rate-limit audit trail: a restart seeds every caller's windows
/// from it instead of handing out a fresh burst.
pub(super) fn open_audit(
    config: &Config,
    limits: &LimitSet<String, MonotonicClock>,
    ids: &[LimitId],
) -> Result<Audit, ConfigError> {
    // The rate-limit audit trail: a restart seeds every caller's windows
    // from it instead of handing out a fresh burst.
    let audit_path = config.data_dir.join("ratelimit-audit.jsonl");
    let (audit, loaded) = Audit::open(audit_path.clone(), limits, ids).map_err(|e| {
        ConfigError::Other(format!(
            "cannot open rate-limit audit trail {}: {e}",
            audit_path.display()
        ))
    })?;
    if loaded.malformed > 0 {
        tracing::warn!(
            malformed = loaded.malformed,
            "skipped unreadable lines in the rate-limit audit trail"
        );
    }
    if loaded.refused > 0 {
        tracing::warn!(
            refused = loaded.refused,
            "audit-trail records not restored: a caller table was full (ATE_MAX_CALLERS)"
        );
    }
    tracing::info!(
        seeded = loaded.seeded,
        expired = loaded.expired,
        "rate limits seeded from the audit trail"
    );
    Ok(audit)
}

/// The limits: in process, or in Redis (one node or a cluster) when
/// configured.
pub(super) fn shared_limits(
    config: &Config,
    limits: LimitSet<String, MonotonicClock>,
) -> Result<Limits, ConfigError> {
    let store = match (&config.ratelimit_redis_url, &config.ratelimit_redis_cluster) {
        (Some(url), _) => Some((RedisConfig::new(url.as_str()), "ATE_RATELIMIT_REDIS_URL")),
        (None, Some(nodes)) => Some((
            RedisConfig::cluster(nodes.iter().cloned()),
            "ATE_RATELIMIT_REDIS_CLUSTER",
        )),
        (None, None) => None,
    };
    let limits = match store {
        None => Limits::local(limits),
        Some((store, var)) => {
            let store = store
                .prefix("ate-example")
                .fallback(config.ratelimit_redis_fallback)
                .connect()
                .map_err(|e| ConfigError::Other(format!("{var}: {e}")))?;
            Limits::redis(limits, store)
        }
    };
    Ok(limits)
}

/// The capabilities, both not ready until checked once, their gauges in
/// `metrics` and their changes logged.
pub(super) fn capabilities(metrics: &Metrics) -> Result<ate_readiness::Capabilities, ConfigError> {
    // Both start not ready: checked once before the pod invites
    // traffic to them (`ready_after_checks`, the provider's health).
    let capabilities = ate_readiness::Capabilities::builder()
        .capability(config::PROMPT_BRIDGE)
        .capability(config::CLIENT_NOTIFICATIONS)
        .build()
        .map_err(|e| ConfigError::Other(format!("capabilities: {e}")))?;
    {
        let gauges = metrics.capabilities_sink();
        for c in capabilities.snapshot().capabilities {
            gauges(&c.name, c.state.is_ready());
        }
        capabilities.on_change(move |name, state| {
            gauges(name, state.is_ready());
            if state.is_ready() {
                tracing::info!(capability = name, "capability ready");
            } else {
                tracing::warn!(capability = name, ?state, "capability not ready");
            }
        });
    }
    Ok(capabilities)
}

/// Logs what startup recovery resolved; a failure stops the start.
fn recovered(
    result: Result<Vec<ate_ledger::Record>, ate_ledger::Error>,
) -> Result<(), ConfigError> {
    match result {
        Ok(r) if !r.is_empty() => {
            tracing::warn!(count = r.len(), "recovered open attempts");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ConfigError::Other(format!("ledger recovery failed: {e}"))),
    }
}
