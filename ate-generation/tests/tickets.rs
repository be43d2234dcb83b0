//! An apply ticket belongs to the latch that issued it; a recorded apply
//! that lost a race is superseded, not an error; the compare-and-swap form
//! of the observed write for replicas sharing one stored row.

use std::sync::Barrier;

use ate_generation::{
    CasOutcome, Decision, Error, Latch, Observe, ObserveCas, SharedLatch, Writer,
};
use parking_lot::Mutex;

fn ticket(latch: &Latch) -> ate_generation::ApplyTicket {
    match latch.gate() {
        Decision::Apply(t) => t,
        Decision::Skip => panic!("{latch:?} is converged"),
    }
}

/// A ticket from latch A recorded into latch B (same numbers, another
/// object) is refused and moves nothing; it used to move B's observed.
#[test]
fn a_ticket_from_another_latch_is_refused() {
    let a = Latch::from_parts(3, 1).unwrap();
    let mut b = Latch::from_parts(3, 1).unwrap();
    assert_eq!(a, b, "equality compares the numbers only");
    let from_a = ticket(&a);
    assert_eq!(b.record(from_a), Err(Error::ForeignTicket { target: 3 }));
    assert_eq!(b.observed_generation(), 1);
    // A copy of a latch is the same latch: its tickets record there.
    let mut copy = a;
    assert!(matches!(
        copy.record(ticket(&a)),
        Ok(Observe::Advanced { from: 1, to: 3 })
    ));
    // A shared latch issues tickets for itself.
    let shared = SharedLatch::new(Latch::new());
    let Decision::Apply(t) = shared.gate() else {
        panic!("a new latch applies")
    };
    assert!(shared.record(t).is_ok());
    assert!(shared.get().is_converged());
    let err = Error::ForeignTicket { target: 3 }.to_string();
    assert!(err.contains('3') && err.contains("another latch"), "{err}");
}

/// Two reconcilers apply in turn; the later apply is recorded first. The
/// earlier one's record is `Superseded` (it used to be a `Regression`
/// error), and observed stays at the later target.
#[test]
fn a_recorded_apply_that_lost_the_race_is_superseded() {
    let shared = SharedLatch::new(Latch::from_parts(2, 1).unwrap());
    let Decision::Apply(first) = shared.gate() else {
        panic!()
    };
    shared.bump().unwrap();
    let Decision::Apply(second) = shared.gate() else {
        panic!()
    };
    assert!(matches!(
        shared.record(second),
        Ok(Observe::Advanced { from: 1, to: 3 })
    ));
    assert_eq!(
        shared.record(first),
        Ok(Observe::Superseded {
            observed: 3,
            target: 2
        })
    );
    assert_eq!(shared.get().observed_generation(), 3);
    // A direct write below observed is still a regression.
    assert!(matches!(
        shared.observe(Writer::ControlPlane, 2),
        Err(Error::Regression { .. })
    ));
}

/// A stored row as a database holds it: the compare-and-swap runs its
/// `WHERE` and write atomically (as one `UPDATE` does).
struct Row(Mutex<(u64, u64)>);

impl Row {
    fn read(&self) -> Latch {
        let (g, o) = *self.0.lock();
        Latch::from_parts(g, o).unwrap()
    }

    /// `UPDATE ... SET observed = $1 WHERE observed <= $1 AND generation >= $1
    /// RETURNING generation, observed`, then a read when nothing updated.
    fn update(&self, cas: ObserveCas) -> (bool, Latch) {
        let mut row = self.0.lock();
        let now = Latch::from_parts(row.0, row.1).unwrap();
        if cas.accepts(now) {
            row.1 = cas.target();
        }
        (cas.accepts(now), Latch::from_parts(row.0, row.1).unwrap())
    }

    fn bump(&self) {
        self.0.lock().0 += 1;
    }
}

/// Replicas reading one row, bumping it, applying and recording by
/// compare-and-swap: observed never moves backwards, never passes the
/// generation, every record is `Recorded` or `Superseded`, and the last
/// record leaves the row at the newest applied target.
#[test]
fn replicas_recording_by_compare_and_swap_never_move_observed_backwards() {
    const REPLICAS: usize = 4;
    let row = Row(Mutex::new((1, 0)));
    let start = Barrier::new(REPLICAS);
    let superseded = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for r in 0..REPLICAS {
            let (row, start, superseded) = (&row, &start, &superseded);
            s.spawn(move || {
                start.wait();
                for i in 0..500 {
                    if (i + r) % 3 == 0 {
                        row.bump();
                    }
                    let seen = row.read();
                    let Decision::Apply(t) = seen.gate() else {
                        continue;
                    };
                    let cas = t.cas();
                    let (updated, after) = row.update(cas);
                    assert!(after.observed_generation() <= after.generation());
                    match cas.settle(updated, after) {
                        Ok(CasOutcome::Recorded) => {
                            assert_eq!(after.observed_generation(), cas.target());
                        }
                        Ok(CasOutcome::Superseded { observed }) => {
                            assert!(observed > cas.target());
                            superseded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Ok(other) => panic!("unexpected {other:?}"),
                        Err(e) => panic!("replica {r}: {e}"),
                    }
                }
            });
        }
    });
    let end = row.read();
    assert!(end.observed_generation() <= end.generation());
}

/// The helper's verdicts on each kind of result, including results that
/// break the rule (a statement that missed the row).
#[test]
fn a_compare_and_swap_result_is_read_exactly() {
    let latch = Latch::from_parts(5, 2).unwrap();
    let cas = ticket(&latch).cas();
    assert_eq!(cas.target(), 5);
    let row = |g, o| Latch::from_parts(g, o).unwrap();
    assert!(cas.accepts(row(5, 2)) && cas.accepts(row(6, 5)));
    assert!(!cas.accepts(row(7, 6)) && !cas.accepts(row(4, 4)));
    assert_eq!(cas.settle(true, row(6, 5)), Ok(CasOutcome::Recorded));
    assert_eq!(
        cas.settle(false, row(7, 6)),
        Ok(CasOutcome::Superseded { observed: 6 })
    );
    assert_eq!(
        cas.settle(false, row(4, 4)),
        Err(Error::Overshoot {
            generation: 4,
            attempted: 5
        })
    );
    let missed = cas.settle(false, row(6, 2)).unwrap_err();
    assert_eq!(
        missed,
        Error::CasNotApplied {
            target: 5,
            generation: 6,
            observed: 2
        }
    );
    assert!(
        cas.settle(true, row(6, 4)).is_err(),
        "updated, yet not there"
    );
}
