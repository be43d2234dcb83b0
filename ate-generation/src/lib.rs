//! ate-generation (work in progress).
#![warn(missing_docs)]
