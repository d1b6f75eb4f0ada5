//! The only code that opens keys or sets expiry: the module data type, its persistence
//! callbacks, and key access for the commands.
//!
//! - [`Key`] (in `key.rs`): an open key, as the commands read and write it; safe code only;
//! - [`CounterKey`] (in `counter.rs`): RL.COUNTER's key, a plain Redis string and its TTL;
//! - `pointer.rs`: the value pointer Redis holds for a key, in one of four forms (an
//!   inline word, a block of rule words, a 16-byte cell, a whole [`codec::Record`]), and
//!   all the code that looks behind it;
//! - [`RL_TYPE`] (in `data_type.rs`): the data type and its `extern "C"` callbacks (RDB, AOF
//!   rewrite, memory usage, digest, free, copy, the policies' aux data);
//! - [`codec`]: the versioned byte encoding of a record; [`compact`] and [`interner`]: the
//!   packed forms and the table of interned parameters they refer to; [`value`]: what an
//!   algorithm's key holds; [`policies`]: the policies, their persistence and propagation;
//!   [`eviction`]: whether the server's `maxmemory-policy` can evict limiter keys.
//!
//! Of storage, only `pointer.rs` and `data_type.rs` hold code the compiler cannot check (see
//! the rule in `crate::redis`).

pub mod codec;
pub mod compact;
mod counter;
// The data type's callbacks: what Redis hands them is raw.
#[allow(unsafe_code)]
mod data_type;
pub mod eviction;
mod interner;
mod key;
// The value pointer in its four forms, and every unsafe block behind it.
#[allow(unsafe_code)]
mod pointer;
pub mod policies;
pub mod value;

pub use counter::{CounterKey, Written};
pub use data_type::{count_key_overhead, RL_TYPE};
pub use key::{Key, Updated};
pub use value::{Value, Variant};
