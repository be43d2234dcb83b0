//! Prometheus metrics: gate gauges read from a snapshot at scrape time,
//! counters for rate-limit decisions and ledger transitions.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ready: Gauge,
    draining: Gauge,
    in_flight: Gauge,
    ratelimit_keys: Gauge,
    ratelimit_store_up: Gauge,
    ledger_store_fault: Gauge,
    decisions: Family<Labels, Counter>,
    transitions: Family<Labels, Counter>,
    capabilities: Family<Labels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let ready = Gauge::default();
        let draining = Gauge::default();
        let in_flight = Gauge::default();
        let ratelimit_keys = Gauge::default();
        let ratelimit_store_up = Gauge::default();
        let ledger_store_fault = Gauge::default();
        let decisions = Family::<Labels, Counter>::default();
        let transitions = Family::<Labels, Counter>::default();
        let capabilities = Family::<Labels, Gauge>::default();
        registry.register(
            "ate_ready",
            "1 while serving, 0 while draining",
            ready.clone(),
        );
        registry.register(
            "ate_drain_in_progress",
            "1 while draining",
            draining.clone(),
        );
        registry.register(
            "ate_in_flight",
            "Admitted work not yet finished",
            in_flight.clone(),
        );
        registry.register(
            "ate_ratelimit_keys",
            "Caller windows held, summed over the rate limits (drained ones until swept)",
            ratelimit_keys.clone(),
        );
        registry.register(
            "ate_ratelimit_store_up",
            "1 while the rate limits' store answers (in process: always), 0 while a shared \
             Redis does not and the fallback decides",
            ratelimit_store_up.clone(),
        );
        registry.register(
            "ate_ledger_store_fault",
            "1 while the ledger's redb file cannot be written (an I/O error, say a full disk; \
             the store reopens it at the next write), 0 otherwise",
            ledger_store_fault.clone(),
        );
        registry.register(
            "ate_ratelimit_decisions",
            "Rate-limit decisions by limit and result",
            decisions.clone(),
        );
        registry.register(
            "ate_ledger_transitions",
            "Ledger transitions by outcome",
            transitions.clone(),
        );
        registry.register(
            "ate_capability_ready",
            "1 while the capability is ready, by name",
            capabilities.clone(),
        );
        Self {
            registry,
            ready,
            draining,
            in_flight,
            ratelimit_keys,
            ratelimit_store_up,
            ledger_store_fault,
            decisions,
            transitions,
            capabilities,
        }
    }

    /// Sets a capability's gauge (`ate_capability_ready{name=...}`), for
    /// the capabilities' change callback.
    pub fn capabilities_sink(&self) -> impl Fn(&str, bool) + Send + Sync + 'static {
        let gauges = self.capabilities.clone();
        move |name, ready| {
            gauges
                .get_or_create(&vec![("name".into(), name.into())])
                .set(i64::from(ready));
        }
    }

    /// Counts a rate-limit decision.
    pub fn decision(&self, limit: &str, result: &'static str) {
        self.decisions
            .get_or_create(&vec![
                ("limit".into(), limit.into()),
                ("result".into(), result.into()),
            ])
            .inc();
    }

    /// Counts ledger transitions, from the ledger's observer.
    pub fn transitions(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let transitions = self.transitions.clone();
        move |outcome| {
            transitions
                .get_or_create(&vec![("outcome".into(), outcome.into())])
                .inc();
        }
    }

    /// Renders the exposition, refreshing the gauges first from the gate's
    /// snapshot, the rate limits' key count and the ledger store's fault.
    pub fn render(
        &self,
        snapshot: &ate_readiness::Snapshot,
        ratelimit_keys: usize,
        ratelimit_store_up: bool,
        ledger_store_fault: bool,
    ) -> String {
        self.ledger_store_fault.set(i64::from(ledger_store_fault));
        self.ratelimit_keys
            .set(i64::try_from(ratelimit_keys).unwrap_or(i64::MAX));
        self.ratelimit_store_up.set(i64::from(ratelimit_store_up));
        self.ready.set(snapshot.ready_gauge());
        self.draining.set(snapshot.drain_in_progress_gauge());
        self.in_flight
            .set(i64::try_from(snapshot.in_flight).unwrap_or(i64::MAX));
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.push_str("# encoding failed\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    #[test]
    fn the_ledger_store_fault_is_a_gauge_of_its_own() {
        let metrics = Metrics::new();
        let snapshot = ate_readiness::Gate::builder().build().snapshot();
        let sample = |fault| {
            metrics
                .render(&snapshot, 0, true, fault)
                .lines()
                .any(|l| l == format!("ate_ledger_store_fault {}", u8::from(fault)))
        };
        assert!(sample(true));
        assert!(sample(false));
    }
}
