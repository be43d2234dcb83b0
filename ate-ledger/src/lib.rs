//! ate-ledger (work in progress).
#![warn(missing_docs)]
