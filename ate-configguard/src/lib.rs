//! ate-configguard (work in progress).
#![warn(missing_docs)]
