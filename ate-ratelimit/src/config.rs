//! Limits from code defaults, overridden by environment variables (and
//! deserializable with the `serde` feature).

use std::ffi::OsString;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::error::Error;
use crate::{LimitSet, Policy, Quota, clock::Clock};

/// One named limit: its default, the variable that may override it, and its
/// window.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct LimitSpec {
    /// The limit's name (reported when it denies).
    pub name: String,
    /// The environment variable that overrides `limit`, if any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub env: Option<String>,
    /// Attempts per window (the code default).
    pub limit: NonZeroU32,
    /// The window (default 60 s). Serialized as whole seconds
    /// (`"window": 60`).
    #[cfg_attr(feature = "serde", serde(default = "default_window", with = "secs"))]
    pub window: Duration,
}

#[cfg(feature = "serde")]
fn default_window() -> Duration {
    Quota::DEFAULT_WINDOW
}

#[cfg(feature = "serde")]
mod secs {
    use std::time::Duration;

    /// Whole seconds; a window with a fraction of a second is an error
    /// naming it (truncating it would write a different limit).
    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos() != 0 {
            return Err(serde::ser::Error::custom(format!(
                "window {d:?} is not a whole number of seconds (the serialized form)"
            )));
        }
        s.serialize_u64(d.as_secs())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        let secs = <std::num::NonZeroU64 as serde::Deserialize>::deserialize(d)?;
        Ok(Duration::from_secs(secs.get()))
    }
}

/// A table of limits with code defaults.
///
/// ```
/// use std::num::NonZeroU32;
/// use ate_ratelimit::config::LimitTable;
///
/// let table = LimitTable::new()
///     .limit("notifications", "APP_NOTIFICATIONS_PER_MIN", NonZeroU32::new(150).unwrap())
///     .limit("requests", "APP_REQUESTS_PER_MIN", NonZeroU32::new(600).unwrap());
/// // At startup: a bad value is an error naming the variable and the value.
/// let env = |var: &str| (var == "APP_REQUESTS_PER_MIN").then(|| "0".into());
/// let err = table.resolve_with(env).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     r#"invalid value "0" for APP_REQUESTS_PER_MIN: must be a positive integer, not zero"#
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct LimitTable {
    specs: Vec<LimitSpec>,
}

impl LimitTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a per-minute limit overridable by `env`.
    #[must_use]
    pub fn limit(self, name: &str, env: &str, default: NonZeroU32) -> Self {
        self.spec(LimitSpec {
            name: name.into(),
            env: Some(env.into()),
            limit: default,
            window: Quota::DEFAULT_WINDOW,
        })
    }

    /// Adds a limit.
    #[must_use]
    pub fn spec(mut self, spec: LimitSpec) -> Self {
        self.specs.push(spec);
        self
    }

    /// The specs.
    pub fn specs(&self) -> &[LimitSpec] {
        &self.specs
    }

    /// Sets every window (for tests and demos with short windows).
    #[must_use]
    pub fn with_window(mut self, window: Duration) -> Self {
        for s in &mut self.specs {
            s.window = window;
        }
        self
    }

    /// Resolves each limit against the process environment.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEnv`] naming the first variable whose value is not a
    /// positive integer (empty, zero, signed, padded, non-numeric, over
    /// `u32::MAX`, or not UTF-8) and the value; [`Error::WindowTooLong`]
    /// for a window over [`Quota::MAX_WINDOW`]; [`Error::DuplicateLimit`]
    /// for a name given twice.
    pub fn resolve_env(&self) -> Result<Vec<(String, Quota)>, Error> {
        self.resolve_os(|var| std::env::var_os(var))
    }

    /// Resolves each limit with a lookup (`None` = unset: the default).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEnv`] naming the first variable whose value is not a
    /// positive integer (empty, zero, signed, padded, non-numeric, over
    /// `u32::MAX`, or not UTF-8) and the value; [`Error::WindowTooLong`]
    /// for a window over [`Quota::MAX_WINDOW`]; [`Error::DuplicateLimit`]
    /// for a name given twice.
    pub fn resolve_with(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, Quota)>, Error> {
        self.resolve_os(|var| lookup(var).map(OsString::from))
    }

    fn resolve_os(
        &self,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Vec<(String, Quota)>, Error> {
        let mut out: Vec<(String, Quota)> = Vec::with_capacity(self.specs.len());
        for spec in &self.specs {
            if out.iter().any(|(n, _)| *n == spec.name) {
                return Err(Error::DuplicateLimit(spec.name.clone()));
            }
            let limit = match spec
                .env
                .as_deref()
                .and_then(|var| lookup(var).map(|v| (var, v)))
            {
                None => spec.limit,
                Some((var, value)) => match value.into_string() {
                    Ok(value) => parse_positive(var, &value)?,
                    Err(raw) => {
                        return Err(Error::InvalidEnv {
                            var: var.into(),
                            value: raw.to_string_lossy().into_owned(),
                            reason: "not valid UTF-8",
                        });
                    }
                },
            };
            out.push((spec.name.clone(), Quota::new(limit, spec.window)?));
        }
        Ok(out)
    }

    /// Resolves against the environment and builds a [`LimitSet`].
    ///
    /// # Errors
    ///
    /// As for [`resolve_env`](Self::resolve_env).
    pub fn build_set<K, C>(&self, policy: Policy, clock: C) -> Result<LimitSet<K, C>, Error>
    where
        K: std::hash::Hash + Eq + Clone,
        C: Clock + Clone,
    {
        let mut set = LimitSet::new(policy, clock);
        for (name, quota) in self.resolve_env()? {
            let _ = set.add(name, quota);
        }
        Ok(set)
    }
}

/// Parses a limit value: ASCII digits only (no sign, no whitespace, no
/// underscores), fitting a `u32`, not zero.
///
/// # Errors
///
/// [`Error::InvalidEnv`] naming `var`, `value` and what is wrong with it.
pub fn parse_positive(var: &str, value: &str) -> Result<NonZeroU32, Error> {
    let err = |reason| Error::InvalidEnv {
        var: var.into(),
        value: value.into(),
        reason,
    };
    if value.is_empty() {
        return Err(err("empty; must be a positive integer"));
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("must be a positive integer (digits only)"));
    }
    let n: u32 = value
        .parse()
        .map_err(|_| err("too large; the maximum is 4294967295"))?;
    NonZeroU32::new(n).ok_or_else(|| err("must be a positive integer, not zero"))
}
