//! ate-ratelimit (work in progress).
#![warn(missing_docs)]
