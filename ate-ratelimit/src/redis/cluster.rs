//! Redis Cluster routing, as the store needs it: the slot of a key, and
//! which slots share a node, so that a node that hangs costs one timeout
//! per `recheck_after`, not one per slot its callers touch.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// text between the first `{` and the next `}`, if not empty) or of the
/// whole key, modulo 16,384.
pub(super) fn slot(key: &[u8]) -> usize {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    usize::from(crc16::State::<crc16::XMODEM>::calculate(tag)) % 16_384
}

/// Which master serves each slot, as the cluster last said
/// (`CLUSTER SLOTS`), and whether a new connection is being made.
///
/// It only widens a down mark (from one slot to its node's slots); it
/// routes nothing, so a map that is out of date after a failover costs at
/// most a fallback for `recheck_after` to callers that did not need it,
/// and is learned again on the next failure.
#[derive(Debug, Default)]
pub(super) struct Topology {
    /// `(first slot, last slot, node)`, the node named by its id (or its
    /// address where the server gives no id).
    ranges: parking_lot::RwLock<Vec<(usize, usize, Arc<str>)>>,
    /// Whether a task is making a new connection now: one at a time.
    renewing: AtomicBool,
    /// Whether `ranges` holds a map: one load on a successful check's
    /// path, where the lock and the clock would cost more.
    known: AtomicBool,
    /// When the map was last asked for (ms on the store's clock, 0:
    /// never), so that a cluster that refuses to tell it is asked at most
    /// once per [`RETRY_MS`].
    tried_ms: AtomicU64,
}

/// How long a store whose slot map is unknown waits between two asks.
const RETRY_MS: u64 = 1_000;

impl Topology {
    /// Whether a map has been learned.
    pub(super) fn is_known(&self) -> bool {
        self.known.load(Ordering::Acquire)
    }

    /// Whether the map should be asked for at `now_ms()`: none is known
    /// and the last ask was [`RETRY_MS`] ago or more (or never made). The
    /// clock is read only while no map is known.
    pub(super) fn wants_learning(&self, now_ms: impl FnOnce() -> u64) -> bool {
        if self.is_known() {
            return false;
        }
        let tried = self.tried_ms.load(Ordering::Relaxed);
        tried == 0 || now_ms().saturating_sub(tried) >= RETRY_MS
    }

    /// Notes an ask for the map at `now_ms`.
    pub(super) fn tried(&self, now_ms: u64) {
        self.tried_ms.store(now_ms.max(1), Ordering::Relaxed);
    }

    /// Takes `reply` (a `CLUSTER SLOTS` answer) as the map; false, leaving
    /// the map as it was, if it is not one.
    pub(super) fn learn(&self, reply: &redis::Value) -> bool {
        let Some(ranges) = parse_slots(reply) else {
            return false;
        };
        let known = !ranges.is_empty();
        *self.ranges.write() = ranges;
        self.known.store(known, Ordering::Release);
        true
    }

    /// The slots served by the node that serves `slot`: `slot` alone while
    /// no map says which node that is.
    pub(super) fn node_slots(&self, slot: usize) -> Vec<RangeInclusive<usize>> {
        let ranges = self.ranges.read();
        let Some((_, _, node)) = ranges.iter().find(|r| (r.0..=r.1).contains(&slot)) else {
            return vec![slot..=slot];
        };
        ranges
            .iter()
            .filter(|r| r.2 == *node)
            .map(|r| r.0..=r.1)
            .collect()
    }

    /// Claims the right to make a new connection: false while another
    /// task holds it.
    pub(super) fn start_renewing(&self) -> bool {
        !self.renewing.swap(true, Ordering::AcqRel)
    }

    /// Gives that right back.
    pub(super) fn done_renewing(&self) {
        self.renewing.store(false, Ordering::Release);
    }
}

/// The ranges of a `CLUSTER SLOTS` reply: each entry is
/// `[first, last, [host, port, id, ...], replicas...]`.
fn parse_slots(reply: &redis::Value) -> Option<Vec<(usize, usize, Arc<str>)>> {
    let redis::Value::Array(entries) = reply else {
        return None;
    };
    let int = |v: &redis::Value| match v {
        redis::Value::Int(i) => usize::try_from(*i).ok().filter(|&s| s < 16_384),
        _ => None,
    };
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let redis::Value::Array(parts) = entry else {
            return None;
        };
        let (first, last) = (int(parts.first()?)?, int(parts.get(1)?)?);
        let redis::Value::Array(master) = parts.get(2)? else {
            return None;
        };
        let node = match master.get(2).and_then(text) {
            Some(id) if !id.is_empty() => id,
            _ => format!("{}:{}", text(master.first()?)?, text(master.get(1)?)?),
        };
        ranges.push((first.min(last), first.max(last), Arc::from(node)));
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::Topology;
    use redis::Value;

    fn master(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    fn range(first: i64, last: i64, node: Value) -> Value {
        Value::Array(vec![Value::Int(first), Value::Int(last), node])
    }

    #[test]
    fn a_slot_widens_to_every_range_of_its_node() {
        let t = Topology::default();
        assert_eq!(t.node_slots(42), vec![42..=42], "no map: the slot alone");
        let reply = Value::Array(vec![
            range(0, 99, master("10.0.0.1", 6379, "a")),
            range(100, 199, master("10.0.0.2", 6379, "b")),
            range(200, 16_383, master("10.0.0.1", 6379, "a")),
        ]);
        assert!(t.learn(&reply));
        assert!(t.is_known());
        assert_eq!(t.node_slots(42), vec![0..=99, 200..=16_383]);
        assert_eq!(t.node_slots(150), vec![100..=199]);
    }

    #[test]
    fn a_reply_that_is_not_a_slot_map_changes_nothing() {
        let t = Topology::default();
        assert!(t.learn(&Value::Array(vec![range(0, 16_383, master("h", 1, "a"))])));
        assert!(!t.learn(&Value::SimpleString("OK".into())));
        assert!(!t.learn(&Value::Array(vec![Value::Int(3)])));
        assert!(!t.learn(&Value::Array(vec![range(0, 99_999, master("h", 1, "b"))])));
        assert_eq!(t.node_slots(7), vec![0..=16_383]);
    }

    #[test]
    fn an_unknown_map_is_asked_for_at_most_once_a_second() {
        let t = Topology::default();
        assert!(t.wants_learning(|| 0), "never asked");
        t.tried(5);
        assert!(!t.wants_learning(|| 5));
        assert!(!t.wants_learning(|| 1_004));
        assert!(t.wants_learning(|| 1_005), "a second later");
        assert!(t.learn(&Value::Array(vec![range(0, 16_383, master("h", 1, "a"))])));
        assert!(!t.wants_learning(|| 1_000_000), "known: not asked again");
    }

    #[test]
    fn a_master_without_an_id_is_named_by_its_address() {
        let t = Topology::default();
        let reply = Value::Array(vec![
            range(0, 9, master("10.0.0.1", 6379, "")),
            range(10, 19, master("10.0.0.1", 6380, "")),
        ]);
        assert!(t.learn(&reply));
        assert_eq!(t.node_slots(3), vec![0..=9]);
    }
}
