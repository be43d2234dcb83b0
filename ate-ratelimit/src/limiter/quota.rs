//! A limit's terms: [`Quota`] (so many attempts per trailing window) and
//! the [`Policy`] that says whether denied attempts count.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::time::Duration;

/// N attempts per trailing window W.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    pub(super) limit: NonZeroU32,
    pub(super) window: Duration,
}

impl Quota {
    /// The default window: 60 seconds.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

    /// `limit` attempts per minute.
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self {
            limit,
            window: Self::DEFAULT_WINDOW,
        }
    }

    /// The longest window a quota may have: 2^31 - 1 seconds, about 68
    /// years. Keyed limiters keep a window in `u32` offsets of 1 s ticks at
    /// that length, and a shortened window would make the limit looser;
    /// [`Quota::new`] refuses a longer one instead.
    pub const MAX_WINDOW: Duration = Duration::from_secs((1 << 31) - 1);

    /// `limit` attempts per trailing `window`. A zero window is taken as the
    /// smallest the limiter can represent (1 ns for [`Limiter`](crate::Limiter), one 1 µs
    /// tick for keyed limiters).
    ///
    /// # Errors
    ///
    /// [`Error::WindowTooLong`](crate::Error::WindowTooLong) for a window
    /// longer than [`MAX_WINDOW`](Self::MAX_WINDOW).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use ate_ratelimit::{Error, Quota};
    ///
    /// let ten = NonZeroU32::new(10).unwrap();
    /// let quota = Quota::new(ten, Duration::from_secs(3600))?;
    /// assert_eq!(quota.window(), Duration::from_secs(3600));
    /// assert!(matches!(
    ///     Quota::new(ten, Quota::MAX_WINDOW + Duration::from_secs(1)),
    ///     Err(Error::WindowTooLong { .. })
    /// ));
    /// # Ok::<(), Error>(())
    /// ```
    pub const fn new(limit: NonZeroU32, window: Duration) -> Result<Self, crate::Error> {
        if window.as_secs() > Self::MAX_WINDOW.as_secs()
            || (window.as_secs() == Self::MAX_WINDOW.as_secs() && window.subsec_nanos() > 0)
        {
            return Err(crate::Error::WindowTooLong {
                window,
                max: Self::MAX_WINDOW,
            });
        }
        Ok(Self { limit, window })
    }

    /// The attempts allowed per window.
    pub const fn limit(&self) -> NonZeroU32 {
        self.limit
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        self.window
    }
}

/// What is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Policy {
    /// Every attempt, allowed or DENIED, is recorded and counts. A caller
    /// that keeps arriving above the limit stays throttled for as long as it
    /// keeps arriving; once it slows below the limit, it is allowed again
    /// within one window. The default.
    #[default]
    CountDenied,
    /// Only allowed attempts are recorded (a classic sliding log): a caller
    /// hammering above the limit still gets N per window through.
    AllowedOnly,
}
