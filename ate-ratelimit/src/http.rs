//! What an HTTP layer needs from a limiter, framework-neutral (features
//! `tower` and `actix` build on it): the caller's key, taken from the peer
//! or from forwarding headers only through trusted proxies, and the IETF
//! `RateLimit-Policy` / `RateLimit` header fields.
//!
//! The request path runs one way: the framework adapters (`tower`,
//! `actix`) ask `rules` for the verdict, which writes `fields`; `caller`
//! takes the key through `client_ip`; `key` is the floor.

mod caller;
mod client_ip;
mod fields;
mod key;
pub(crate) mod rules;

pub use caller::{Caller, Head};
pub use client_ip::{ClientIp, Source, TrustedProxies};
pub(crate) use fields::{RATELIMIT, RATELIMIT_POLICY};
pub use fields::{policy_field, ratelimit_field};
pub use key::KeyError;
pub use rules::Checked;
