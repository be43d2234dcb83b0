//! The limiters: one window ([`Limiter`]), one window per key
//! ([`KeyedLimiter`]), and several named keyed limits checked together
//! ([`LimitSet`]).

mod builder;
mod decide;
mod direct;
mod keyed;
mod quota;
mod set;
pub use builder::KeyedBuilder;
pub use direct::Limiter;
pub use keyed::{KeyedLimiter, Seeded};
pub use quota::{Policy, Quota};
pub use set::{LimitId, LimitSet};
