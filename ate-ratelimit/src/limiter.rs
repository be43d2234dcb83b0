//! The limiters: one window ([`Limiter`]), one window per key
//! ([`KeyedLimiter`]), and several named keyed limits checked together
//! ([`LimitSet`]).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::Error;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::{Combined, Decision};
use crate::lock::Lock;
use crate::ring::{MAX_HELD, Record, Step, Timeline};
use crate::window::{Geometry, Window};

mod builder;
mod decide;
use decide::*;
mod direct;
mod keyed;
mod quota;
mod set;
pub use builder::*;
pub use direct::*;
pub use keyed::*;
pub use quota::*;
pub use set::*;
