//! One async front for named limits kept in this process or, with the
//! `redis` feature, in a store every replica shares. Every check is
//! decided (shared, by the fallback, or refused as configured) and says
//! where ([`Scope`](crate::Scope)); none waits past the store's timeout.

use std::fmt;
use std::num::NonZeroU32;

use crate::Policy;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::{Combined, Scope};
use crate::error::Error;
use crate::limiter::{LimitId, LimitSet};

/// Named limits a service checks per call, wherever they are kept: a
/// [`LimitSet`] in this process ([`Limits::local`]), or, with the `redis`
/// feature, a Redis every replica shares (`Limits::redis`), which falls
/// back to the same set in process while the store cannot answer (or
/// refuses, as configured). The check is async for both; in process it
/// answers at once, so a service switches by configuration and its HTTP
/// layer does not change.
///
/// ```
/// use std::num::NonZeroU32;
/// use ate_ratelimit::{LimitSet, Limits, MonotonicClock, Policy, Quota, Scope};
///
/// let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
/// let notify = set.add("notify", Quota::per_minute(NonZeroU32::new(150).unwrap()));
/// let limits = Limits::local(set); // or Limits::redis(set, store)
/// # futures_lite_block_on(async {
/// let decision = limits.check(&[notify], "caller-42").await;
/// assert!(decision.is_allowed());
/// assert_eq!(decision.scope(), Scope::Process);
/// # });
/// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let waker = std::task::Waker::noop();
/// #     match f.as_mut().poll(&mut std::task::Context::from_waker(&waker)) {
/// #         std::task::Poll::Ready(v) => v,
/// #         std::task::Poll::Pending => unreachable!("a local check never waits"),
/// #     }
/// # }
/// ```
pub struct Limits<C: Clock + Clone = MonotonicClock> {
    set: LimitSet<String, C>,
    #[cfg(feature = "redis")]
    store: Option<crate::redis::RedisStore>,
}

impl<C: Clock + Clone> fmt::Debug for Limits<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Limits");
        d.field("set", &self.set);
        #[cfg(feature = "redis")]
        d.field("store", &self.store);
        d.finish()
    }
}

impl<C: Clock + Clone> Limits<C> {
    /// Limits kept in this process.
    pub fn local(set: LimitSet<String, C>) -> Self {
        Self {
            set,
            #[cfg(feature = "redis")]
            store: None,
        }
    }

    /// Limits kept in `store`, one window per caller and limit for every
    /// replica; `set` names them, gives their quotas and policy, and keeps
    /// the fallback windows ([`Fallback::Local`](crate::Fallback::Local)).
    #[cfg(feature = "redis")]
    pub fn redis(set: LimitSet<String, C>, store: crate::redis::RedisStore) -> Self {
        Self {
            set,
            store: Some(store),
        }
    }

    /// The limits' set (names, ids, quotas; the in-process windows).
    pub fn set(&self) -> &LimitSet<String, C> {
        &self.set
    }

    /// The shared store, if the limits are kept in one.
    #[cfg(feature = "redis")]
    pub fn store(&self) -> Option<&crate::redis::RedisStore> {
        self.store.as_ref()
    }

    /// Where checks are decided now: [`Scope::Process`] without a store;
    /// with one, [`Scope::Shared`] while it answers, else what the fallback
    /// makes of it. A gauge for `/metrics`.
    pub fn scope(&self) -> Scope {
        #[cfg(feature = "redis")]
        if let Some(store) = &self.store {
            return match (store.is_up(), store.config().fallback_policy()) {
                (true, _) => Scope::Shared,
                (false, crate::redis::Fallback::Refuse) => Scope::Unavailable,
                (false, _) => Scope::Fallback,
            };
        }
        Scope::Process
    }

    /// Checks one attempt by `caller` against the limits `ids`.
    ///
    /// # Panics
    ///
    /// If an id is another set's (ids come from [`set`](Self::set)).
    pub async fn check(&self, ids: &[LimitId], caller: &str) -> Combined<'_> {
        self.run(ids, caller, 1, None).await
    }

    /// Checks `cost` attempts at once by `caller` against the limits `ids`
    /// (see [`LimitSet::check_n`]).
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`], naming the limit, when `cost` exceeds the
    /// limit of one of `ids`.
    ///
    /// # Panics
    ///
    /// If an id is another set's.
    pub async fn check_n(
        &self,
        ids: &[LimitId],
        caller: &str,
        cost: NonZeroU32,
    ) -> Result<Combined<'_>, Error> {
        self.fits(ids, cost)?;
        Ok(self.run(ids, caller, cost.get(), None).await)
    }

    /// [`check_n`](Self::check_n) at an explicit time: the set's clock's
    /// time in process, and the same number of microseconds in the store
    /// (instead of the store's own clock): for tests that step through
    /// time. A key written so expires no sooner than a minute of the
    /// store's own time, whatever its window: the store cannot relate the
    /// given clock to its own, and a window of milliseconds would expire
    /// under a test whose steps take longer on a busy machine.
    ///
    /// # Errors
    ///
    /// As for [`check_n`](Self::check_n).
    ///
    /// # Panics
    ///
    /// If an id is another set's.
    pub async fn check_n_at(
        &self,
        ids: &[LimitId],
        caller: &str,
        cost: NonZeroU32,
        now: Timestamp,
    ) -> Result<Combined<'_>, Error> {
        self.fits(ids, cost)?;
        Ok(self.run(ids, caller, cost.get(), Some(now)).await)
    }

    /// [`check_n`](Self::check_n) without awaiting, where the limits are
    /// kept in process (`None` where a shared store must be asked): the
    /// HTTP layers decide in `call` then, with no boxed future.
    #[cfg(any(feature = "tower", feature = "actix"))]
    pub(crate) fn check_n_now(
        &self,
        ids: &[LimitId],
        caller: &str,
        cost: NonZeroU32,
    ) -> Option<Result<Combined<'_>, Error>> {
        #[cfg(feature = "redis")]
        if self.store.is_some() {
            return None;
        }
        Some(
            self.fits(ids, cost)
                .map(|()| self.run_local(ids, caller, cost.get(), None, Scope::Process)),
        )
    }

    fn fits(&self, ids: &[LimitId], cost: NonZeroU32) -> Result<(), Error> {
        for &id in ids {
            let limit = self.set.limiter(id).quota().limit();
            if cost > limit {
                return Err(Error::CostOverLimit {
                    name: self.set.name(id).to_owned(),
                    cost: cost.get(),
                    limit: limit.get(),
                });
            }
        }
        Ok(())
    }

    async fn run(
        &self,
        ids: &[LimitId],
        caller: &str,
        cost: u32,
        now: Option<Timestamp>,
    ) -> Combined<'_> {
        #[cfg(feature = "redis")]
        if let Some(store) = &self.store {
            return self.run_shared(store, ids, caller, cost, now).await;
        }
        self.run_local(ids, caller, cost, now, Scope::Process)
    }

    fn run_local(
        &self,
        ids: &[LimitId],
        caller: &str,
        cost: u32,
        now: Option<Timestamp>,
        scope: Scope,
    ) -> Combined<'_> {
        let now = now.unwrap_or_else(|| self.set.clock().now());
        let mut combined = self.set.combined(ids, caller, now, cost);
        combined.scope = scope;
        combined
    }

    #[cfg(feature = "redis")]
    async fn run_shared(
        &self,
        store: &crate::redis::RedisStore,
        ids: &[LimitId],
        caller: &str,
        cost: u32,
        now: Option<Timestamp>,
    ) -> Combined<'_> {
        use crate::decision::Decision;
        use crate::redis::{Fallback, Times, Window};
        use smallvec::SmallVec;
        // Each limit once, as in process.
        let mut order: SmallVec<[LimitId; 4]> = ids.iter().copied().collect();
        order.sort_unstable();
        order.dedup();
        let windows: SmallVec<[Window<'_>; 4]> = order
            .iter()
            .map(|&id| {
                let quota = self.set.limiter(id).quota();
                // The in-process tick and window, so a replica that falls
                // back rounds the same attempts alike.
                let g = crate::window::Geometry::new(quota.limit().get(), quota.window());
                Window {
                    name: self.set.name(id),
                    limit: quota.limit().get(),
                    window_ticks: g.window,
                    tick_us: g.tick_nanos / 1_000,
                }
            })
            .collect();
        let times = now.map(|t| Times {
            now_ns: t.as_nanos(),
        });
        let count_denied = self.set.policy() == Policy::CountDenied;
        match store.run(caller, &windows, cost, count_denied, times).await {
            Ok(answers) => {
                let recorded = count_denied || answers.iter().all(|a| a.allowed);
                let decide = |limit: u32, a: &crate::redis::Answer| {
                    if a.allowed {
                        Decision::Allowed {
                            remaining: limit - a.count - if recorded { cost } else { 0 },
                        }
                    } else {
                        Decision::Denied {
                            retry_after: a.wait,
                        }
                    }
                };
                let wait = answers.iter().map(|a| a.wait).max().unwrap_or_default();
                let at = |id: &LimitId| order.binary_search(id).expect("every id was checked");
                let decisions = ids
                    .iter()
                    .map(|id| {
                        let a = &answers[at(id)];
                        (self.set.name(*id), decide(windows[at(id)].limit, a))
                    })
                    .collect();
                // Never past the window (see `oldest_leaves_in`).
                let resets = ids
                    .iter()
                    .map(|id| {
                        answers[at(id)]
                            .reset
                            .min(self.set.limiter(*id).quota().window())
                    })
                    .collect();
                Combined {
                    decisions,
                    wait,
                    resets,
                    scope: Scope::Shared,
                    store_error: None,
                }
            }
            Err(error) => {
                let mut combined = match store.config().fallback_policy() {
                    Fallback::Refuse => {
                        let retry_after = store.config().retry_after_value();
                        Combined {
                            decisions: ids
                                .iter()
                                .map(|id| {
                                    (self.set.name(*id), Decision::Unavailable { retry_after })
                                })
                                .collect(),
                            wait: retry_after,
                            resets: ids.iter().map(|_| retry_after).collect(),
                            scope: Scope::Unavailable,
                            store_error: None,
                        }
                    }
                    _ => self.run_local(ids, caller, cost, now, Scope::Fallback),
                };
                combined.store_error = Some(error);
                combined
            }
        }
    }

    /// The policy of the set.
    pub fn policy(&self) -> Policy {
        self.set.policy()
    }
}
