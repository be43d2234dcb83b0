//! The formats the previous release wrote, read by this build: the files
//! in `tests/compat/0.2.0/` were written by release 0.2.0 (the commit
//! `compat/baseline` names). A Redis window its script kept (five checks
//! of the example's `notifications` limit on the server's clock) must
//! count here exactly as there, and this build's runs must be laid out as
//! 0.2.0 reads them; the serde forms must read and write the same bytes.

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat/0.2.0");

#[cfg(feature = "serde")]
#[test]
fn limit_tables_and_policies_release_0_2_0_wrote_read_and_write_the_same() {
    use ate_ratelimit::Policy;
    use ate_ratelimit::config::LimitTable;
    let text = std::fs::read_to_string(format!("{DIR}/limit-table.json")).unwrap();
    let table: LimitTable = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = table.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["notifications", "prompt"]);
    assert_eq!(serde_json::to_string(&table).unwrap(), text.trim_end());
    let text = std::fs::read_to_string(format!("{DIR}/policy.json")).unwrap();
    let policies: Vec<Policy> = serde_json::from_str(&text).unwrap();
    assert_eq!(policies, [Policy::CountDenied, Policy::AllowedOnly]);
    assert_eq!(serde_json::to_string(&policies).unwrap(), text.trim_end());
}

#[cfg(all(feature = "redis", feature = "test-util"))]
mod redis_window {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use ate_ratelimit::clock::{ManualClock, Timestamp};
    use ate_ratelimit::testing::TestRedis;
    use ate_ratelimit::{Fallback, LimitSet, Limits, Policy, Quota, RedisConfig};

    /// The key and the runs (head first) of the fixture.
    fn fixture() -> (String, Vec<Vec<u8>>) {
        let text = std::fs::read_to_string(format!("{}/redis-window.txt", super::DIR)).unwrap();
        let mut key = None;
        let mut runs = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some(k) = line.strip_prefix("key ") {
                key = Some(k.to_owned());
            } else if let Some(hex) = line.strip_prefix("run ") {
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                runs.push(bytes);
            }
        }
        (key.unwrap(), runs)
    }

    /// A run's time, in the limit's ticks (here microseconds).
    fn time(run: &[u8]) -> u64 {
        f64::from_be_bytes(run[..8].try_into().unwrap()) as u64
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_window_release_0_2_0_kept_counts_the_same_and_grows_as_it_reads() {
        let (key, runs) = fixture();
        assert_eq!(runs.len(), 5);
        let server = TestRedis::start();
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(&key)
            .arg(&runs)
            .query_async(&mut conn)
            .await
            .unwrap();
        // The example's limit, under the example's prefix: the key 0.2.0
        // named for caller `caller:fixture` must be the one checked here.
        let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
        let id = set.add(
            "notifications",
            Quota::new(NonZeroU32::new(150).unwrap(), Duration::from_secs(60)).unwrap(),
        );
        let store = RedisConfig::new(server.url())
            .prefix("ate-example")
            .timeout(Duration::from_secs(2))
            .fallback(Fallback::Refuse)
            .connect()
            .unwrap();
        let limits = Limits::redis(set, store);
        let at = |us: u64| Timestamp::from_nanos(us * 1_000);
        let one = NonZeroU32::new(1).unwrap();
        let newest = time(&runs[0]);
        let oldest = time(&runs[4]);
        // A second after the fifth: the five count, this is the sixth.
        let a = limits
            .check_n_at(&[id], "caller:fixture", one, at(newest + 1_000_000))
            .await
            .unwrap();
        assert!(a.is_allowed(), "{a:?}");
        assert_eq!(a.remaining(), 144, "0.2.0's five attempts count");
        // A window after the oldest: it has left, the other five count.
        let b = limits
            .check_n_at(&[id], "caller:fixture", one, at(oldest + 60_000_000))
            .await
            .unwrap();
        assert_eq!(b.remaining(), 144, "the oldest left on time");
        // What this build wrote is laid out as 0.2.0 reads it: 28-byte
        // runs, head first, the untouched runs byte for byte.
        let now: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(now.iter().all(|r| r.len() == 28));
        assert_eq!(now.len(), 6, "the oldest trimmed, two added");
        assert_eq!(time(&now[0]), oldest + 60_000_000);
        assert_eq!(time(&now[1]), newest + 1_000_000);
        assert_eq!(now[2..], runs[..4]);
    }
}
