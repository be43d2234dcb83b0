//! The keyed rows again, with ate and governor interleaved: for 1,000 and
//! 100,000 keys, on the allowed and the denied path, batches of 200,000
//! checks (keys taken with a stride of 7,919, as the criterion rows do),
//! ate then governor, 300 times over. Criterion runs one function after
//! the other, and on this shared VM a neighbour's use of the cache moved
//! the 100k rows by up to 2x between runs of the same code; interleaving
//! lands it on both. The fastest tenth of batches (p10) is what a quiet
//! machine gives; its ratio is the row to read. Prints one JSON line per
//! row (ns per check).
//!
//! Each side's batch follows one of the other's, so at 1,000 keys on the
//! allowed path (a 1 ms window, which a key's attempts fill to about 30
//! while its side runs) every batch starts with the windows drained, as a
//! burst after a pause does.

use ate_benches::{Spread, interleaved, limiter_paths};
use ate_ratelimit::KeyedLimiter;

const CHECKS: u32 = 200_000;

/// The next key: a stride of 7,919 (a prime) over `keys`.
fn next(i: &mut u64, keys: u64) -> u64 {
    *i = (*i + 7_919) % keys;
    *i
}

fn main() {
    // `keyed_ab [KEYS [BATCHES]]`: one size only, fewer batches (300 by
    // default; a few, to run it under valgrind).
    let arg = |n: usize| {
        std::env::args().nth(n).map(|a| {
            a.parse::<u64>().unwrap_or_else(|e| {
                eprintln!("keyed_ab: argument {n} must be a number, not {a:?}: {e}");
                std::process::exit(2);
            })
        })
    };
    let sizes = arg(1).map_or_else(|| vec![1_000, 100_000], |keys| vec![keys]);
    let batches = arg(2).map_or(300, |b| b as usize);
    for keys in sizes {
        for (path, ate_q, gov_q) in limiter_paths() {
            let ate = KeyedLimiter::new(ate_q);
            let gov = governor::RateLimiter::keyed(gov_q);
            for k in 0..keys {
                let _ = (ate.check(&k), gov.check_key(&k));
            }
            let (mut i, mut j) = (0u64, 0u64);
            let (a, g): (Spread, Spread) = interleaved(
                batches,
                CHECKS,
                || ate.check(&next(&mut i, keys)).is_allowed(),
                || gov.check_key(&next(&mut j, keys)).is_ok(),
            );
            println!(
                "{{\"path\":\"{path}\",\"keys\":{keys},\"ate\":{},\"governor\":{}}}",
                a.json(),
                g.json()
            );
        }
    }
}
