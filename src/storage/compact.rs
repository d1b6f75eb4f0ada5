//! The packed forms of a limiter key; the table of interned parameters they refer to is
//! [`super::interner`].
//!
//! A Redis key already costs about 117 bytes (`SET key <integer> PX <ms>`: its dict entry,
//! name, object, expiry entry and buckets) and a module value adds a 16-byte wrapper, so
//! anything we allocate per key costs on top of that. Most keys of a limiter share their
//! parameters and hold a state of a few integers, so:
//!
//! - parameters are interned with an epoch ([`Interned`]): a table ([`Interner`]) holds each
//!   distinct pair once, counted by reference, and a key holds its index;
//! - an **inline word** ([`pack_word`]) holds a 16-bit index and 46 bits of state, the state's
//!   time measured from the slot's epoch: the word is the value pointer itself (tagged in its
//!   low bits by the storage layer), with no allocation;
//! - a policy's rules pack as one such word each ([`pack_rules`]), in one block;
//! - a state too large for a word packs into a 16-byte [`Cell`] (a 32-bit index of a slot
//!   and 96 bits: a GCRA or leaky-bucket TAT at most about 2^92 until the year 4000 at the
//!   largest rate, a token bucket's fixed-point tokens (42 bits) and update time (54 bits), a
//!   window's index (42 bits) and counts, all under a slot of epoch 0; a warm-up key's stored
//!   permits and schedule side by side, the schedule from its slot's epoch when it needs one,
//!   see [`cell_base`]).
//!
//! A state that fits none (a huge token bucket, counts past 2^27 in a sliding window, a
//! warm-up key of a very high rate and a very long warm-up), every sliding log and every concurrency
//! limiter keep the whole [`Value`]: nothing is ever rounded to fit.
//!
//! To pack a new kind of state (a new algorithm), add its [`Params`] variant, then its split
//! into an anchor (the part that moves with time) and a rest ([`Packs`], and its line in
//! `packing!`), and the anchor's bits in [`anchor_bits`]; the storage layer needs nothing
//! more. A kind left out keeps the whole value.

use std::sync::{Mutex, MutexGuard};

use algorithms::fixed_window::{self, FixedWindow};
use algorithms::gcra::{self, Gcra};
use algorithms::leaky_bucket::{self, LeakyBucket};
use algorithms::rule_set::{Rule, RuleState, MAX_RULES};
use algorithms::sliding_window::{self, SlidingWindow};
use algorithms::token_bucket::{self, TokenBucket};
use algorithms::warmup::{self, Warmup};
use algorithms::Algorithm;

use super::interner;
use super::value::{Stored, Value};

/// The parameters of every algorithm that packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Params {
    Gcra(gcra::Params),
    TokenBucket(token_bucket::Params),
    LeakyBucket(leaky_bucket::Params),
    FixedWindow(fixed_window::Params),
    SlidingWindow(sliding_window::Params),
    Warmup(warmup::Params),
}

/// What the table interns: a parameter set and an epoch, the base that the anchor of an inline
/// state (its time, in the state's own unit) is measured from. A [`Cell`] holds an absolute
/// state, under a slot of base 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interned {
    pub params: Params,
    pub base: u128,
}

/// The table of parameter sets the packed forms refer to.
pub type Interner = interner::Interner<Interned>;

/// The module's one table. Behind a mutex: Redis may free values on its lazy-free thread
/// (FLUSHALL ASYNC), which releases their slots.
static INTERNER: Mutex<Interner> = Mutex::new(Interner::new());

/// The table, also after a panic elsewhere left the lock poisoned (its data stays valid:
/// every method leaves it consistent before it could panic).
pub fn interner() -> MutexGuard<'static, Interner> {
    INTERNER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A key's compact value: interned parameters and a packed state. 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Cell {
    pub params: u32,
    state_high: u32,
    state_low: u64,
}

const STATE_BITS: u32 = 96;

impl Cell {
    pub fn new(params: u32, state: u128) -> Cell {
        Cell {
            params,
            state_high: (state >> 64) as u32,
            state_low: state as u64,
        }
    }

    pub fn state(&self) -> u128 {
        (u128::from(self.state_high) << 64) | u128::from(self.state_low)
    }
}

fn fits(x: u128, bits: u32) -> bool {
    x >> bits == 0
}

/// Packs `value`'s state into 96 bits with its parameters, measured from `base` (the base
/// of the cell's slot: 0 but for a warm-up key, see [`cell_base`]), or `None` when it cannot
/// be.
pub fn pack(value: &Value, base: u128) -> Option<(Params, u128)> {
    if base != 0 && !matches!(value, Value::Warmup(_)) {
        return None;
    }
    match value {
        Value::Gcra(s) => {
            fits(s.state.tat, STATE_BITS).then_some((Params::Gcra(s.params), s.state.tat))
        }
        Value::LeakyBucket(s) => {
            fits(s.state.tat, STATE_BITS).then_some((Params::LeakyBucket(s.params), s.state.tat))
        }
        Value::TokenBucket(s) => {
            let (tokens, at) = (s.state.scaled_tokens, u128::from(s.state.updated_us));
            (fits(tokens, 42) && fits(at, 54))
                .then_some((Params::TokenBucket(s.params), tokens << 54 | at))
        }
        Value::FixedWindow(s) => {
            let start = u128::from(s.state.window_start_us);
            let index = exact_quotient(start, window_us(s.params.window_ms))?;
            let count = u128::from(s.state.count);
            (fits(index, 42) && fits(count, 54))
                .then_some((Params::FixedWindow(s.params), index << 54 | count))
        }
        Value::SlidingWindow(s) => {
            let start = u128::from(s.state.window_start_us);
            let index = exact_quotient(start, window_us(s.params.window_ms))?;
            let (current, previous) = (u128::from(s.state.current), u128::from(s.state.previous));
            (fits(index, 42) && fits(current, 27) && fits(previous, 27)).then_some((
                Params::SlidingWindow(s.params),
                index << 54 | current << 27 | previous,
            ))
        }
        Value::Warmup(s) => {
            // The stored permits in the low bits that the most a key stores needs, the
            // schedule (`next_free`, from the slot's base) in the bits left: both exact, or
            // no cell.
            let sb = warmup_stored_bits(&s.params);
            let stored = s.state.stored;
            let next_free = s.state.next_free.checked_sub(base)?;
            (sb <= STATE_BITS && fits(stored, sb) && fits(next_free, STATE_BITS - sb))
                .then_some((Params::Warmup(s.params), next_free << sb | stored))
        }
        Value::SlidingLog(_) | Value::Concurrency(_) | Value::RuleSet(_) => None,
    }
}

/// The base of the slot a new cell for `value` takes. 0 (one slot for every key of a
/// parameter set), but for a warm-up key whose schedule is past the bits its stored permits
/// leave (at 1,000 a minute warming up in a minute, 57 bits, and now is about 2^61 ticks): its
/// epoch, the schedule rounded down to a quarter of the span those bits cover, as an inline
/// word's is. Only while that quarter is at least 2^30 µs (about 18 minutes), so that keys of
/// one parameter set share an epoch for a while; past it, 0, and the key keeps its whole value.
pub fn cell_base(value: &Value) -> u128 {
    let Value::Warmup(s) = value else {
        return 0;
    };
    let sb = warmup_stored_bits(&s.params);
    let Some(bits) = STATE_BITS.checked_sub(sb) else {
        return 0;
    };
    let next_free = s.state.next_free;
    if fits(next_free, bits) || bits < 2 {
        return 0;
    }
    let q = bits - 2;
    // The quarter spans 2^q ticks of 1/rate µs.
    if u128::from(s.params.rate) << 30 <= 1u128 << q {
        (next_free >> q) << q
    } else {
        0
    }
}

/// The bits a warm-up key's cell gives its stored permits: as many as the most it stores
/// (a cold key's, [`warmup::Params::max_stored`]) takes, so that the rest, for its schedule,
/// depends on the parameters alone.
fn warmup_stored_bits(params: &warmup::Params) -> u32 {
    128 - params.max_stored().leading_zeros()
}

/// The value a cell's packed state stands for, with `interned` the slot it names (the inverse
/// of [`pack`]).
pub fn unpack(interned: &Interned, state: u128) -> Value {
    let Interned { params, base } = interned;
    let low = |bits: u32| (state & ((1u128 << bits) - 1)) as u64;
    match *params {
        Params::Gcra(params) => Value::Gcra(Stored {
            params,
            state: gcra::State { tat: state },
        }),
        Params::LeakyBucket(params) => Value::LeakyBucket(Stored {
            params,
            state: leaky_bucket::State { tat: state },
        }),
        Params::TokenBucket(params) => Value::TokenBucket(Stored {
            params,
            state: token_bucket::State {
                scaled_tokens: state >> 54,
                updated_us: low(54),
            },
        }),
        Params::FixedWindow(params) => {
            let index = (state >> 54) as u64;
            let window_start_us = index.saturating_mul(params.window_ms.saturating_mul(1000));
            Value::FixedWindow(Stored {
                params,
                state: fixed_window::State {
                    window_start_us,
                    count: low(54),
                },
            })
        }
        Params::SlidingWindow(params) => {
            let index = (state >> 54) as u64;
            let window_start_us = index.saturating_mul(params.window_ms.saturating_mul(1000));
            let current = ((state >> 27) & ((1 << 27) - 1)) as u64;
            Value::SlidingWindow(Stored {
                params,
                state: sliding_window::State {
                    window_start_us,
                    current,
                    previous: low(27),
                },
            })
        }
        Params::Warmup(params) => {
            let sb = warmup_stored_bits(&params).min(STATE_BITS);
            Value::Warmup(Stored {
                params,
                state: warmup::State {
                    stored: state & ((1u128 << sb) - 1),
                    next_free: base.saturating_add(state >> sb),
                },
            })
        }
    }
}

/// Bits of an inline word that name its table slot: the slots numbered below 2^16 can be
/// used inline; a key whose slot is numbered higher falls back to a [`Cell`].
pub const INDEX_BITS: u32 = 16;
/// Bits of an inline word that hold the state: 64, less the two bits of the pointer's tag and
/// the index.
pub const PAYLOAD_BITS: u32 = 64 - 2 - INDEX_BITS;
/// The index's place in an inline word (above the tag).
const INDEX_SHIFT: u32 = 2;
const PAYLOAD_SHIFT: u32 = INDEX_SHIFT + INDEX_BITS;

/// An inline word of slot `id` and `payload` (the tag's bits left clear).
#[inline]
pub fn word(id: u32, payload: u64) -> u64 {
    (payload << PAYLOAD_SHIFT) | (u64::from(id) << INDEX_SHIFT)
}

/// The slot and the payload of an inline word.
#[inline]
pub fn word_parts(word: u64) -> (u32, u64) {
    (
        ((word >> INDEX_SHIFT) & ((1 << INDEX_BITS) - 1)) as u32,
        word >> PAYLOAD_SHIFT,
    )
}

/// The bits of a payload that hold the anchor, measured from the slot's base; the rest of the
/// state takes the bits below. Chosen so that an epoch spans far longer than a key of usual
/// parameters lives: a GCRA TAT 2^46 units of 1/rate µs (about 80 days at 10 per period, 70
/// s at 10^6), a token bucket's update time 2^30 µs (18 minutes), 2^14 fixed windows, 2^10
/// sliding windows, a warm-up key's schedule 2^38 units of 1/rate µs (about 7.6 hours at 10
/// per period, 4 s at [`MAX_INLINE_WARMUP_RATE`]) with 8 bits for its deficit.
#[inline]
fn anchor_bits(params: &Params) -> u32 {
    match params {
        Params::Gcra(_) | Params::LeakyBucket(_) => PAYLOAD_BITS,
        Params::Warmup(_) => WARMUP_ANCHOR_BITS,
        Params::TokenBucket(_) => 30,
        Params::FixedWindow(_) => 14,
        Params::SlidingWindow(_) => 10,
    }
}

/// A new epoch's base is the anchor rounded down to a multiple of 2^(anchor bits − 2): keys of
/// one parameter set written at about the same time share it, and each key has three quarters
/// of the span left before its anchor would not fit.
fn quantum_bits(params: &Params) -> u32 {
    anchor_bits(params) - 2
}

/// The most units per period a GCRA or leaky bucket packs inline at: above it an epoch would
/// span less than about a second (2^44 units of 1/rate µs), so that keys would hardly share
/// one; such keys keep a [`Cell`].
const MAX_INLINE_RATE: u64 = 1 << 24;

/// The bits of a warm-up key's inline payload for its schedule; the 8 below hold its deficit
/// in whole permits.
const WARMUP_ANCHOR_BITS: u32 = 38;

/// The most permits per period a warm-up key packs inline at: an epoch spans at least about
/// 4 s (2^36 ticks of 1/rate µs), as a GCRA's does at [`MAX_INLINE_RATE`].
const MAX_INLINE_WARMUP_RATE: u64 = MAX_INLINE_RATE >> (PAYLOAD_BITS - WARMUP_ANCHOR_BITS);

/// A token bucket's period in µs, the unit its tokens are counted in (as the algorithm does).
fn token_unit(params: &token_bucket::Params) -> u128 {
    u128::from(params.refill_period_ms.max(1)).saturating_mul(1000)
}

/// A window's length in µs.
fn window_us(window_ms: u64) -> u128 {
    u128::from(window_ms) * 1000
}

/// `n / d` when `d` divides `n` exactly (`None` otherwise, or for `d` 0), in 64 bits when both
/// fit (the usual case: a window's start and length in µs), since a 128-bit division is a
/// library call on the write path of every window key.
#[inline]
fn exact_quotient(n: u128, d: u128) -> Option<u128> {
    match (u64::try_from(n), u64::try_from(d)) {
        (Ok(n), Ok(d)) => {
            let q = n.checked_div(d)?;
            (q * d == n).then_some(u128::from(q))
        }
        _ => {
            let q = n.checked_div(d)?;
            (q * d == n).then_some(q)
        }
    }
}

/// How one algorithm's state goes into an inline word: split into an anchor (the part that
/// moves with time: a TAT, an update time, a window's index), measured from an epoch, and a
/// rest packed into the payload's low bits; `join` is the inverse. `split` is `None` when the
/// rest does not fit exactly, or the parameters are out of the inline range.
trait Packs: Algorithm {
    fn split(params: &Self::Params, state: &Self::State) -> Option<(u128, u64)>;
    fn join(params: &Self::Params, anchor: u128, rest: u64) -> Self::State;
}

fn fits64(x: u64, bits: u32) -> bool {
    x >> bits == 0
}

impl Packs for Gcra {
    #[inline]
    fn split(params: &gcra::Params, state: &gcra::State) -> Option<(u128, u64)> {
        (params.rate <= MAX_INLINE_RATE).then_some((state.tat, 0))
    }

    #[inline]
    fn join(_: &gcra::Params, anchor: u128, _: u64) -> gcra::State {
        gcra::State { tat: anchor }
    }
}

impl Packs for LeakyBucket {
    #[inline]
    fn split(params: &leaky_bucket::Params, state: &leaky_bucket::State) -> Option<(u128, u64)> {
        (params.leak_amount <= MAX_INLINE_RATE).then_some((state.tat, 0))
    }

    #[inline]
    fn join(_: &leaky_bucket::Params, anchor: u128, _: u64) -> leaky_bucket::State {
        leaky_bucket::State { tat: anchor }
    }
}

impl Packs for TokenBucket {
    /// Whole tokens only (a fresh key, an INTERVAL bucket, a full one): 16 bits.
    #[inline]
    fn split(params: &token_bucket::Params, state: &token_bucket::State) -> Option<(u128, u64)> {
        let tokens = exact_quotient(state.scaled_tokens, token_unit(params))?;
        let tokens = u64::try_from(tokens).ok()?;
        fits64(tokens, 16).then_some((u128::from(state.updated_us), tokens))
    }

    #[inline]
    fn join(params: &token_bucket::Params, anchor: u128, rest: u64) -> token_bucket::State {
        token_bucket::State {
            scaled_tokens: u128::from(rest) * token_unit(params),
            updated_us: u64::try_from(anchor).unwrap_or(u64::MAX),
        }
    }
}

impl Packs for FixedWindow {
    #[inline]
    fn split(params: &fixed_window::Params, state: &fixed_window::State) -> Option<(u128, u64)> {
        let start = u128::from(state.window_start_us);
        let index = exact_quotient(start, window_us(params.window_ms))?;
        fits64(state.count, 32).then_some((index, state.count))
    }

    #[inline]
    fn join(params: &fixed_window::Params, anchor: u128, rest: u64) -> fixed_window::State {
        fixed_window::State {
            window_start_us: window_start(anchor, params.window_ms),
            count: rest,
        }
    }
}

impl Packs for SlidingWindow {
    fn split(
        params: &sliding_window::Params,
        state: &sliding_window::State,
    ) -> Option<(u128, u64)> {
        let start = u128::from(state.window_start_us);
        let index = exact_quotient(start, window_us(params.window_ms))?;
        let (current, previous) = (state.current, state.previous);
        (fits64(current, 18) && fits64(previous, 18)).then_some((index, current << 18 | previous))
    }

    #[inline]
    fn join(params: &sliding_window::Params, anchor: u128, rest: u64) -> sliding_window::State {
        sliding_window::State {
            window_start_us: window_start(anchor, params.window_ms),
            current: rest >> 18,
            previous: rest & ((1 << 18) - 1),
        }
    }
}

impl Packs for Warmup {
    /// The deficit below a cold key's stored permits, in whole permits only (a fresh key after
    /// one request, or after requests that each found it cold): 8 bits.
    #[inline]
    fn split(params: &warmup::Params, state: &warmup::State) -> Option<(u128, u64)> {
        if params.rate > MAX_INLINE_WARMUP_RATE {
            return None;
        }
        let deficit = params.max_stored().checked_sub(state.stored)?;
        let permits = exact_quotient(deficit, params.scale())?;
        let j = u64::try_from(permits).ok()?;
        fits64(j, PAYLOAD_BITS - WARMUP_ANCHOR_BITS).then_some((state.next_free, j))
    }

    #[inline]
    fn join(params: &warmup::Params, anchor: u128, rest: u64) -> warmup::State {
        warmup::State {
            stored: params
                .max_stored()
                .saturating_sub(u128::from(rest).saturating_mul(params.scale())),
            next_free: anchor,
        }
    }
}

/// The start in µs of window `index` of `window_ms` (saturating: never out of range for a
/// packed state, which came from a start in range).
fn window_start(index: u128, window_ms: u64) -> u64 {
    u64::try_from(index.saturating_mul(window_us(window_ms))).unwrap_or(u64::MAX)
}

/// Declares the dispatch from a [`Value`], or a policy's [`Rule`] and [`RuleState`], to the
/// algorithm's [`Packs`], for every kind that packs (the variants are named alike in the four
/// enums).
macro_rules! packing {
    ($($variant:ident($algorithm:ty)),*) => {
        /// `value`'s parameters, anchor and rest ([`Packs::split`]); `None` when they do not
        /// fit exactly, or the value never packs inline.
        #[inline]
        fn split(value: &Value) -> Option<(Params, u128, u64)> {
            match value {
                $(Value::$variant(s) => <$algorithm>::split(&s.params, &s.state)
                    .map(|(anchor, rest)| (Params::$variant(s.params), anchor, rest)),)*
                _ => None,
            }
        }

        /// The value an anchor and a rest stand for (the inverse of [`split`]).
        #[inline]
        fn join(params: &Params, anchor: u128, rest: u64) -> Value {
            match *params {
                $(Params::$variant(params) => Value::$variant(Stored {
                    params,
                    state: <$algorithm>::join(&params, anchor, rest),
                }),)*
            }
        }

        /// [`split`] for a policy's rule and its state.
        #[inline]
        fn split_rule(rule: &Rule, state: &RuleState) -> Option<(Params, u128, u64)> {
            match (rule, state) {
                $((Rule::$variant(params), RuleState::$variant(state)) => {
                    <$algorithm>::split(params, state)
                        .map(|(anchor, rest)| (Params::$variant(*params), anchor, rest))
                })*
                _ => None,
            }
        }

        /// [`join`] for a policy's rule: the rule and its state.
        #[inline]
        fn join_rule(params: &Params, anchor: u128, rest: u64) -> (Rule, RuleState) {
            match *params {
                $(Params::$variant(params) => (
                    Rule::$variant(params),
                    RuleState::$variant(<$algorithm>::join(&params, anchor, rest)),
                ),)*
            }
        }

        /// Whether `params` are `rule`'s.
        #[inline]
        fn is_rule(params: &Params, rule: &Rule) -> bool {
            match (params, rule) {
                $((Params::$variant(a), Rule::$variant(b)) => a == b,)*
                _ => false,
            }
        }
    };
}

packing!(
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    Warmup(Warmup)
);

/// Whether `value`'s state splits as an inline word would hold it (it may still not fit one:
/// its anchor past any epoch's span, or the table past the ids a word names).
pub fn fits_inline(value: &Value) -> bool {
    split(value).is_some()
}

/// The anchor and the rest an inline word holds, with `interned` the slot its index names.
#[inline]
fn anchor_and_rest(interned: &Interned, word: u64) -> (u128, u64) {
    let (_, payload) = word_parts(word);
    let rest_bits = PAYLOAD_BITS - anchor_bits(&interned.params);
    let offset = u128::from(payload >> rest_bits);
    let rest = payload & ((1u64 << rest_bits) - 1);
    (interned.base.saturating_add(offset), rest)
}

/// The value an inline word stands for, with `interned` the slot its index names.
pub fn unpack_word(interned: &Interned, word: u64) -> Value {
    let (anchor, rest) = anchor_and_rest(interned, word);
    join(&interned.params, anchor, rest)
}

/// `value` as an inline word (tag bits clear), or `None` when it does not fit one exactly.
///
/// `old` is the slot the key's word used so far: kept when it is the same parameters and the
/// anchor still fits above its base (no reference taken, and none to give back); otherwise
/// the word takes a reference to the slot of the anchor's epoch, and the caller releases
/// `old`'s when it stores the new word.
pub fn pack_word(value: &Value, old: Option<u32>, table: &mut Interner) -> Option<u64> {
    pack_parts(split(value)?, old, table)
}

/// [`pack_word`] of a state already split.
fn pack_parts(
    (params, anchor, rest): (Params, u128, u64),
    old: Option<u32>,
    table: &mut Interner,
) -> Option<u64> {
    if let Some(id) = old {
        let kept = table
            .get(id)
            .and_then(|interned| refit_parts((params, anchor, rest), id, interned));
        if kept.is_some() {
            return kept;
        }
    }
    let q = quantum_bits(&params);
    let base = (anchor >> q) << q;
    let p = payload(&params, anchor, rest, base)?;
    let id = table.acquire(Interned { params, base });
    if id >> INDEX_BITS != 0 || Some(id) == old {
        // Past the ids a word holds; or the slot `old` already holds (an anchor that moved
        // back under its base cannot come here with the same base, but a reference taken
        // twice would never be given back).
        table.release(id);
        return (Some(id) == old).then(|| word(id, p));
    }
    Some(word(id, p))
}

/// `value` as an inline word of slot `id`, which is `interned`, when it is of the same
/// parameters and its anchor fits above the slot's base: no table needed (the common
/// write of a key, which keeps its slot).
pub fn refit(value: &Value, id: u32, interned: &Interned) -> Option<u64> {
    refit_parts(split(value)?, id, interned)
}

/// [`refit`] of a state already split.
fn refit_parts(
    (params, anchor, rest): (Params, u128, u64),
    id: u32,
    interned: &Interned,
) -> Option<u64> {
    if params != interned.params {
        return None;
    }
    payload(&params, anchor, rest, interned.base).map(|p| word(id, p))
}

/// The payload of an anchor and a rest above `base`, when the anchor fits.
#[inline]
fn payload(params: &Params, anchor: u128, rest: u64, base: u128) -> Option<u64> {
    let bits = anchor_bits(params);
    let offset = anchor.checked_sub(base)?;
    (offset >> bits == 0).then(|| ((offset as u64) << (PAYLOAD_BITS - bits)) | rest)
}

/// The words of a policy's rules (each as [`pack_word`] packs a key of the rule's algorithm),
/// or `None` when one does not fit (then no reference is left taken). `old` are the key's
/// words so far: a rule keeps the slot of the word at its place when it can.
pub fn pack_rules(
    rules: &[Rule],
    states: &[RuleState],
    old: &[u64],
    table: &mut Interner,
) -> Option<Vec<u64>> {
    if rules.len() != states.len() {
        return None;
    }
    let mut words = Vec::with_capacity(rules.len());
    for (i, (rule, state)) in rules.iter().zip(states).enumerate() {
        let old_id = old.get(i).map(|&w| word_parts(w).0);
        let packed = split_rule(rule, state).and_then(|parts| pack_parts(parts, old_id, table));
        let Some(w) = packed else {
            release_new(&words, old, table);
            return None;
        };
        words.push(w);
    }
    Some(words)
}

/// Gives back the references `words` took that the words at their places in `old` did not
/// already hold: what a key storing `words` instead of `old` no longer needs is the rest of
/// `old`'s, which the caller releases with [`release_replaced`].
fn release_new(words: &[u64], old: &[u64], table: &mut Interner) {
    for (i, &w) in words.iter().enumerate() {
        let id = word_parts(w).0;
        if old.get(i).map(|&o| word_parts(o).0) != Some(id) {
            table.release(id);
        }
    }
}

/// Releases the references of `old`'s words that `new` (stored in their place) does not keep.
pub fn release_replaced(old: &[u64], new: &[u64], table: &mut Interner) {
    for (i, &o) in old.iter().enumerate() {
        let id = word_parts(o).0;
        if new.get(i).map(|&w| word_parts(w).0) != Some(id) {
            table.release(id);
        }
    }
}

/// The policy a key's rule words stand for: its rules and their states.
pub fn unpack_rules(words: &[u64], table: &Interner) -> Option<Value> {
    let mut rules = Vec::with_capacity(words.len());
    let mut states = Vec::with_capacity(words.len());
    for &w in words {
        let interned = table.get(word_parts(w).0)?;
        let (anchor, rest) = anchor_and_rest(interned, w);
        let (rule, state) = join_rule(&interned.params, anchor, rest);
        rules.push(rule);
        states.push(state);
    }
    Some(Value::RuleSet(Stored {
        params: rules.into(),
        state: states,
    }))
}

/// The slots' bases of a policy key's words, as [`rule_states`] read them.
pub type Bases = [u128; MAX_RULES];

/// The states of a policy key's words when each word's slot holds the rule at its place in
/// `rules` (the policy a request names, unchanged since the key was written: the usual call),
/// with each slot's base in `bases`, so that [`refit_rules`] writes them back without the
/// table. `None` when the rules differ in any way.
pub fn rule_states(
    words: &[u64],
    rules: &[Rule],
    table: &Interner,
    bases: &mut Bases,
) -> Option<Vec<RuleState>> {
    if words.len() != rules.len() || words.len() > MAX_RULES {
        return None;
    }
    let mut states = SPARE.take();
    states.reserve(words.len());
    for ((&w, rule), base) in words.iter().zip(rules).zip(bases.iter_mut()) {
        let interned = table.get(word_parts(w).0)?;
        if !is_rule(&interned.params, rule) {
            states.clear();
            SPARE.set(states);
            return None;
        }
        *base = interned.base;
        let (anchor, rest) = anchor_and_rest(interned, w);
        states.push(join_rule(&interned.params, anchor, rest).1);
    }
    Some(states)
}

thread_local! {
    /// The vector [`rule_states`] read a policy key's states into, once the call is done with
    /// it (emptied): RL.LIMIT then allocates none per call.
    static SPARE: std::cell::Cell<Vec<RuleState>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Drops a value a call is done with; a policy's vector of states is kept (emptied) for
/// the next [`rule_states`].
pub fn recycle(value: Value) {
    if let Value::RuleSet(s) = value {
        let mut states = s.state;
        states.clear();
        if states.capacity() <= MAX_RULES {
            SPARE.set(states);
        }
    }
}

/// Writes `states` of `rules` into `words` in place, each word keeping its slot, when
/// [`rule_states`] read `words` under these `rules` with `bases` and every new state still
/// fits above its slot's base; returns whether it did (else `words` are unchanged).
pub fn refit_rules(words: &mut [u64], rules: &[Rule], states: &[RuleState], bases: &Bases) -> bool {
    let n = words.len();
    if rules.len() != n || states.len() != n || n > MAX_RULES {
        return false;
    }
    let mut new = [0u64; MAX_RULES];
    for (i, (rule, state)) in rules.iter().zip(states).enumerate() {
        let id = word_parts(words[i]).0;
        let Some((params, anchor, rest)) = split_rule(rule, state) else {
            return false;
        };
        let Some(p) = payload(&params, anchor, rest, bases[i]) else {
            return false;
        };
        new[i] = word(id, p);
    }
    words.copy_from_slice(&new[..n]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use algorithms::sliding_log;
    use proptest::prelude::*;

    #[test]
    fn a_cell_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Cell>(), 16);
        let c = Cell::new(7, (1u128 << 95) | 12345);
        assert_eq!((c.params, c.state()), (7, (1u128 << 95) | 12345));
    }

    #[test]
    fn what_does_not_fit_stays_whole() {
        let big_tat = Value::Gcra(Stored {
            params: gcra::Params {
                burst: 1,
                rate: 1,
                period_ms: 1,
            },
            state: gcra::State { tat: 1 << 96 },
        });
        assert_eq!(pack(&big_tat, 0), None);
        let log = Value::SlidingLog(Stored {
            params: sliding_log::Params {
                limit: 1,
                window_ms: 1,
            },
            state: sliding_log::State::new(Default::default(), 0, 1, 0),
        });
        assert_eq!(pack(&log, 0), None);
        let busy = Value::SlidingWindow(Stored {
            params: sliding_window::Params {
                limit: 1 << 30,
                window_ms: 1000,
            },
            state: sliding_window::State {
                window_start_us: 0,
                current: 1 << 27,
                previous: 0,
            },
        });
        assert_eq!(pack(&busy, 0), None);
    }

    fn at0(params: Params) -> Interned {
        Interned { params, base: 0 }
    }

    fn gcra(rate: u64, tat: u128) -> Value {
        Value::Gcra(Stored {
            params: gcra::Params {
                burst: 10,
                rate,
                period_ms: 3_600_000,
            },
            state: gcra::State { tat },
        })
    }

    const NOW_US: u128 = 1_700_000_000_000_000;

    #[test]
    fn an_inline_word_is_one_of_a_key_of_usual_parameters() {
        let mut t = Interner::new();
        let v = gcra(10, NOW_US * 10);
        let w = pack_word(&v, None, &mut t).unwrap();
        let (id, payload) = word_parts(w);
        let interned = *t.get(id).unwrap();
        // The base is the TAT rounded down to 2^44 units; the payload, the TAT above it.
        assert_eq!(interned.base, (NOW_US * 10) >> 44 << 44);
        assert_eq!(u128::from(payload), NOW_US * 10 - interned.base);
        // A second key of the same parameters an hour later shares the slot.
        let later = gcra(10, (NOW_US + 3_600_000_000) * 10);
        assert_eq!(word_parts(pack_word(&later, None, &mut t).unwrap()).0, id);
        assert_eq!(t.refs(id), 2);
        // Past the epoch's span (2^46 units, 81 days at this rate), the key moves to a new
        // one, and its old slot is the caller's to release.
        let far = gcra(10, interned.base + (1 << 46));
        let moved = pack_word(&far, Some(id), &mut t).unwrap();
        assert_ne!(word_parts(moved).0, id);
        assert_eq!(unpack_word(t.get(word_parts(moved).0).unwrap(), moved), far);
        assert_eq!(t.refs(id), 2);
    }

    fn warmup(rate: u64, stored: u128, next_free: u128) -> Value {
        Value::Warmup(Stored {
            params: warmup_params(rate),
            state: warmup::State { stored, next_free },
        })
    }

    fn warmup_params(rate: u64) -> warmup::Params {
        warmup::Params {
            rate,
            period_ms: 3_600_000,
            warmup_ms: 3_600_000,
            cold_factor: 3,
        }
    }

    #[test]
    fn a_fresh_warmup_key_is_one_word_and_keeps_its_epoch_until_it_must_move() {
        use algorithms::warmup::Warmup;
        use algorithms::Algorithm;
        let mut t = Interner::new();
        let params = warmup_params(10);
        let (max, scale) = (params.max_stored(), params.scale());
        // A fresh key after one request of cost 2: exactly two permits below cold.
        let (decision, fresh) = Warmup::check(&params, None, NOW_US as u64, 2, true);
        assert!(decision.allowed);
        let fresh = fresh.unwrap();
        assert_eq!(fresh.stored, max - 2 * scale);
        let v = Value::Warmup(Stored {
            params,
            state: fresh,
        });
        let w = pack_word(&v, None, &mut t).unwrap();
        let (id, payload) = word_parts(w);
        let interned = *t.get(id).unwrap();
        // The base: the schedule rounded down to 2^36 ticks; the payload, the schedule above
        // it and the deficit (2) in the 8 bits below.
        assert_eq!(interned.base, fresh.next_free >> 36 << 36);
        assert_eq!(
            u128::from(payload),
            (fresh.next_free - interned.base) << 8 | 2
        );
        assert_eq!(unpack_word(&interned, w), v);
        // Past the epoch's span (2^38 ticks, 7.6 hours at 10 an hour), a new epoch.
        let far = warmup(10, max - 10 * scale, interned.base + (1 << 38));
        let moved = pack_word(&far, Some(id), &mut t).unwrap();
        assert_ne!(word_parts(moved).0, id);
        assert_eq!(unpack_word(t.get(word_parts(moved).0).unwrap(), moved), far);
        // Within it, the same slot.
        let near = warmup(10, max, interned.base + (1 << 38) - 1);
        assert_eq!(
            word_parts(pack_word(&near, Some(id), &mut t).unwrap()).0,
            id
        );
        // A deficit of a fraction of a permit, or above cold: no word, but a cell holds the
        // first exactly.
        for stored in [max - scale + 1, max + 1] {
            let v = warmup(10, stored, fresh.next_free);
            assert_eq!(pack_word(&v, None, &mut t), None);
            if stored <= max {
                let (p, bits) = pack(&v, 0).unwrap();
                assert_eq!(unpack(&at0(p), bits), v);
            }
        }
        // A cold key of 1000 a millisecond warming up in one stores 1000 permits: 255 below
        // it is a word, 256 a cell.
        let many = warmup::Params {
            rate: 1000,
            period_ms: 1,
            warmup_ms: 1,
            cold_factor: 3,
        };
        let below = |j: u128| {
            Value::Warmup(Stored {
                params: many,
                state: warmup::State {
                    stored: many.max_stored() - j * many.scale(),
                    next_free: NOW_US * 1000,
                },
            })
        };
        assert!(pack_word(&below(255), None, &mut t).is_some());
        assert_eq!(pack_word(&below(256), None, &mut t), None);
        assert!(pack(&below(256), 0).is_some());
        // The cell: 39 bits of stored permits (max < 2^39 here), 57 of schedule.
        assert_eq!(warmup_stored_bits(&params), 39);
        assert!(pack(&warmup(10, max, (1 << 57) - 1), 0).is_some());
        assert_eq!(pack(&warmup(10, max, 1 << 57), 0), None);
        assert_eq!(pack(&warmup(10, 1 << 39, 0), 0), None);
        // Past them, a new cell's slot takes an epoch: the schedule from a multiple of 2^55.
        let late = warmup(10, max - 1, (1 << 57) + 12345);
        assert_eq!(cell_base(&late), 1 << 57);
        let (p, bits) = pack(&late, 1 << 57).unwrap();
        assert_eq!(
            unpack(
                &Interned {
                    params: p,
                    base: 1 << 57
                },
                bits
            ),
            late
        );
        assert_eq!(pack(&late, (1 << 57) + 12346), None);
        // Unless a quarter of what the bits left span is under 2^30 µs: no epoch, no cell.
        let tight = warmup::Params {
            rate: 1_000_000_000_000,
            period_ms: 1,
            warmup_ms: 315_360_000_000,
            cold_factor: 10,
        };
        let tight = Value::Warmup(Stored {
            params: tight,
            state: warmup::State {
                stored: tight.max_stored() - 1,
                next_free: NOW_US * u128::from(tight.rate),
            },
        });
        assert_eq!(cell_base(&tight), 0);
        assert_eq!(pack(&tight, 0), None);
        // A rate whose epoch would span less than about 4 s keeps a cell.
        let fast = warmup::Params {
            rate: MAX_INLINE_WARMUP_RATE + 1,
            ..many
        };
        let fast = Value::Warmup(Stored {
            params: fast,
            state: warmup::State {
                stored: fast.max_stored(),
                next_free: NOW_US * u128::from(fast.rate),
            },
        });
        assert_eq!(pack_word(&fast, None, &mut t), None);
        assert!(pack(&fast, 0).is_some());
    }

    #[test]
    fn what_an_inline_word_cannot_hold_exactly_is_not_packed_into_one() {
        let mut t = Interner::new();
        // A rate whose epoch would span less than about a second.
        assert_eq!(
            pack_word(&gcra(MAX_INLINE_RATE + 1, NOW_US), None, &mut t),
            None
        );
        assert!(pack_word(&gcra(MAX_INLINE_RATE, NOW_US), None, &mut t).is_some());
        let bucket = |scaled_tokens: u128| {
            Value::TokenBucket(Stored {
                params: token_bucket::Params {
                    capacity: 10,
                    refill_amount: 10,
                    refill_period_ms: 1000,
                    interval: false,
                },
                state: token_bucket::State {
                    scaled_tokens,
                    updated_us: NOW_US as u64,
                },
            })
        };
        // Whole tokens pack; a fraction of one does not (the cell holds it).
        assert!(pack_word(&bucket(9_000_000), None, &mut t).is_some());
        assert_eq!(pack_word(&bucket(9_000_001), None, &mut t), None);
        assert!(pack(&bucket(9_000_001), 0).is_some());
        let window = |window_start_us: u64, current: u64| {
            Value::SlidingWindow(Stored {
                params: sliding_window::Params {
                    limit: 1 << 20,
                    window_ms: 1000,
                },
                state: sliding_window::State {
                    window_start_us,
                    current,
                    previous: 0,
                },
            })
        };
        let start = (NOW_US / 1_000_000 * 1_000_000) as u64;
        assert!(pack_word(&window(start, (1 << 18) - 1), None, &mut t).is_some());
        assert_eq!(pack_word(&window(start, 1 << 18), None, &mut t), None);
        assert_eq!(pack_word(&window(start + 1, 1), None, &mut t), None);
        let log = Value::SlidingLog(Stored {
            params: sliding_log::Params {
                limit: 1,
                window_ms: 1,
            },
            state: sliding_log::State::new(Default::default(), 0, 1, 0),
        });
        assert_eq!(pack_word(&log, None, &mut t), None);
    }

    #[test]
    fn past_the_ids_a_word_holds_keys_take_cells() {
        let mut t = Interner::new();
        let ids: Vec<u32> = (1..=1u64 << INDEX_BITS)
            .map(|rate| word_parts(pack_word(&gcra(rate, NOW_US), None, &mut t).unwrap()).0)
            .collect();
        assert_eq!(ids.len(), 1 << INDEX_BITS);
        // The table is full as far as a word can name: the next set is not packed inline,
        // and takes no reference.
        let next = gcra((1 << INDEX_BITS) + 1, NOW_US);
        assert_eq!(pack_word(&next, None, &mut t), None);
        assert_eq!(t.len(), 1 << INDEX_BITS);
        // Once an id is free again, it is.
        t.release(ids[7]);
        assert_eq!(
            word_parts(pack_word(&next, None, &mut t).unwrap()).0,
            ids[7]
        );
    }

    #[test]
    fn a_policy_packs_one_word_per_rule() {
        use algorithms::rule_set::{Rule, RuleState};
        let mut t = Interner::new();
        let rules = [
            Rule::Gcra(gcra::Params {
                burst: 100,
                rate: 100,
                period_ms: 60_000,
            }),
            Rule::FixedWindow(fixed_window::Params {
                limit: 1000,
                window_ms: 3_600_000,
            }),
        ];
        let states = |tat: u128, count: u64| {
            vec![
                RuleState::Gcra(gcra::State { tat }),
                RuleState::FixedWindow(fixed_window::State {
                    window_start_us: 1_699_999_200_000_000,
                    count,
                }),
            ]
        };
        let words = pack_rules(&rules, &states(NOW_US * 100, 1), &[], &mut t).unwrap();
        assert_eq!(words.len(), 2);
        let Some(Value::RuleSet(s)) = unpack_rules(&words, &t) else {
            panic!("not a policy");
        };
        assert_eq!(
            (&*s.params, &s.state),
            (&rules[..], &states(NOW_US * 100, 1))
        );
        // Written again within the epochs: the same slots, no new references.
        let again = pack_rules(&rules, &states(NOW_US * 100 + 7, 2), &words, &mut t).unwrap();
        release_replaced(&words, &again, &mut t);
        let ids = |w: &[u64]| w.iter().map(|&w| word_parts(w).0).collect::<Vec<_>>();
        assert_eq!(ids(&again), ids(&words));
        assert!(ids(&words).iter().all(|&id| t.refs(id) == 1));
        // The GCRA rule past its epoch: a new slot for it, the old one given back.
        let far = states((((NOW_US * 100) >> 44) << 44) + (1 << 46), 3);
        let moved = pack_rules(&rules, &far, &again, &mut t).unwrap();
        release_replaced(&again, &moved, &mut t);
        assert_ne!(ids(&moved)[0], ids(&again)[0]);
        assert_eq!(ids(&moved)[1], ids(&again)[1]);
        assert_eq!(t.len(), 2);
        // A rule that does not pack: nothing packed, no reference left taken.
        let mut big = far.clone();
        big[1] = RuleState::FixedWindow(fixed_window::State {
            window_start_us: 1_699_999_200_000_000,
            count: 1 << 32,
        });
        assert_eq!(pack_rules(&rules, &big, &[], &mut t), None);
        assert!(ids(&moved).iter().all(|&id| t.refs(id) == 1));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_policy_key_read_under_its_own_rules_is_written_back_in_place() {
        use algorithms::rule_set::{Rule, RuleState};
        let mut t = Interner::new();
        let rules = [
            Rule::Gcra(gcra::Params {
                burst: 100,
                rate: 100,
                period_ms: 60_000,
            }),
            Rule::SlidingWindow(sliding_window::Params {
                limit: 1000,
                window_ms: 3_600_000,
            }),
        ];
        let states = |tat: u128, current: u64| {
            vec![
                RuleState::Gcra(gcra::State { tat }),
                RuleState::SlidingWindow(sliding_window::State {
                    window_start_us: 1_699_999_200_000_000,
                    current,
                    previous: 7,
                }),
            ]
        };
        let first = states(NOW_US * 100, 1);
        let mut words = pack_rules(&rules, &first, &[], &mut t).unwrap();
        let ids: Vec<u32> = words.iter().map(|&w| word_parts(w).0).collect();
        let mut bases = [0; MAX_RULES];
        // Read under the same rules: the states as the whole unpack gives them, and the bases.
        let read = rule_states(&words, &rules, &t, &mut bases).unwrap();
        assert_eq!(read, first);
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(bases[i], t.get(id).unwrap().base);
        }
        // Under other rules (a changed limit, one rule fewer): not read this way.
        let mut changed = rules.clone();
        changed[1] = Rule::SlidingWindow(sliding_window::Params {
            limit: 999,
            window_ms: 3_600_000,
        });
        assert_eq!(rule_states(&words, &changed, &t, &mut [0; MAX_RULES]), None);
        assert_eq!(
            rule_states(&words, &rules[..1], &t, &mut [0; MAX_RULES]),
            None
        );
        // Written back: the same slots, the words the whole pack gives.
        let next = states(NOW_US * 100 + 5, 2);
        let expected = pack_rules(&rules, &next, &words, &mut t).unwrap();
        assert!(refit_rules(&mut words, &rules, &next, &bases));
        assert_eq!(words, expected);
        assert!(ids.iter().all(|&id| t.refs(id) == 1));
        // A GCRA anchor past its epoch, or a count past a word: nothing written.
        let before = words.clone();
        let far = states((((NOW_US * 100) >> 44) << 44) + (1 << 46), 3);
        assert!(!refit_rules(&mut words, &rules, &far, &bases));
        let busy = states(NOW_US * 100, 1 << 18);
        assert!(!refit_rules(&mut words, &rules, &busy, &bases));
        assert_eq!(words, before);
    }

    #[test]
    fn a_warmup_rule_packs_in_a_policy_as_a_key_does() {
        use algorithms::rule_set::{Rule, RuleState};
        let mut t = Interner::new();
        let params = warmup_params(10);
        let rules = [
            Rule::Warmup(params),
            Rule::FixedWindow(fixed_window::Params {
                limit: 1000,
                window_ms: 3_600_000,
            }),
        ];
        let states = |stored: u128| {
            vec![
                RuleState::Warmup(warmup::State {
                    stored,
                    next_free: NOW_US * 10,
                }),
                RuleState::FixedWindow(fixed_window::State {
                    window_start_us: 1_699_999_200_000_000,
                    count: 1,
                }),
            ]
        };
        let one_below = states(params.max_stored() - params.scale());
        let words = pack_rules(&rules, &one_below, &[], &mut t).unwrap();
        let Some(Value::RuleSet(s)) = unpack_rules(&words, &t) else {
            panic!("not a policy");
        };
        assert_eq!((&*s.params, &s.state), (&rules[..], &one_below));
        // A fraction of a permit below cold: no words (the policy keeps its whole value), and
        // no reference left taken.
        let fraction = states(params.max_stored() - 1);
        assert_eq!(pack_rules(&rules, &fraction, &[], &mut t), None);
        assert!(words.iter().all(|&w| t.refs(word_parts(w).0) == 1));
    }

    fn round_trips(v: Value) -> Result<(), TestCaseError> {
        if let Some((params, bits)) = pack(&v, 0) {
            prop_assert!(fits(bits, STATE_BITS));
            prop_assert_eq!(unpack(&at0(params), bits), v.clone());
        }
        inline_round_trips(&v)
    }

    /// An inline word, made fresh or against a slot the key held, stands for exactly `v`,
    /// and holds one reference to its slot.
    fn inline_round_trips(v: &Value) -> Result<(), TestCaseError> {
        let mut t = Interner::new();
        let Some((params, anchor, _)) = split(v) else {
            prop_assert_eq!(pack_word(v, None, &mut t), None);
            return Ok(());
        };
        let w = pack_word(v, None, &mut t).expect("what splits packs into a fresh epoch");
        let (id, _) = word_parts(w);
        prop_assert_eq!(w & 3, 0, "the tag's bits are clear");
        prop_assert_eq!(unpack_word(t.get(id).unwrap(), w), v.clone());
        prop_assert_eq!(t.refs(id), 1);
        // Packed again against its own slot: the same word, no reference taken.
        prop_assert_eq!(pack_word(v, Some(id), &mut t), Some(w));
        prop_assert_eq!(t.refs(id), 1);
        // Against a slot of the same parameters at another base (the key's older epoch):
        // kept if the anchor fits above its base, else a new epoch's reference is taken.
        let bases = [
            0,
            anchor.saturating_sub(1),
            anchor.saturating_add(1),
            anchor >> 1,
        ];
        for base in bases {
            let old = t.acquire(Interned { params, base });
            let before = t.refs(old);
            let w2 = pack_word(v, Some(old), &mut t).expect("a fresh epoch always fits");
            let (id2, _) = word_parts(w2);
            prop_assert_eq!(unpack_word(t.get(id2).unwrap(), w2), v.clone());
            prop_assert_eq!(
                t.refs(old),
                before,
                "the old slot's references are the caller's"
            );
            if id2 != old {
                prop_assert!(anchor < base || (anchor - base) >> anchor_bits(&params) != 0);
                t.release(id2);
            }
            t.release(old);
        }
        t.release(id);
        prop_assert_eq!(t.len(), 0);
        Ok(())
    }

    proptest! {
        #[test]
        fn gcra_and_leaky_round_trip(burst in 1u64..1000, rate in 1u64..1_000_000_000_000, period_ms in 1u64..1_000_000, tat in any::<u128>()) {
            round_trips(Value::Gcra(Stored { params: gcra::Params { burst, rate, period_ms }, state: gcra::State { tat } }))?;
            round_trips(Value::LeakyBucket(Stored {
                params: leaky_bucket::Params { capacity: burst, leak_amount: rate, leak_period_ms: period_ms },
                state: leaky_bucket::State { tat },
            }))?;
        }

        #[test]
        fn usual_keys_round_trip_inline(burst in 1u64..100_000, rate in 1u64..=MAX_INLINE_RATE, period_ms in 1u64..100_000_000,
                                        now_us in 0u64..(1 << 62), ahead in any::<u64>(), capacity in 1u64..100_000,
                                        tokens in 0u64..(1 << 17), interval in any::<bool>(), window_ms in 1u64..100_000_000,
                                        count in 0u64..(1 << 33), current in 0u64..(1 << 19), previous in 0u64..(1 << 19)) {
            let tat = u128::from(now_us) * u128::from(rate) + u128::from(ahead);
            let v = Value::Gcra(Stored { params: gcra::Params { burst, rate, period_ms }, state: gcra::State { tat } });
            prop_assert!(split(&v).is_some());
            round_trips(v)?;
            round_trips(Value::LeakyBucket(Stored {
                params: leaky_bucket::Params { capacity: burst, leak_amount: rate, leak_period_ms: period_ms },
                state: leaky_bucket::State { tat },
            }))?;
            let params = token_bucket::Params { capacity, refill_amount: rate, refill_period_ms: period_ms, interval };
            for scaled_tokens in [u128::from(tokens) * token_unit(&params), u128::from(tokens) * token_unit(&params) + 1] {
                round_trips(Value::TokenBucket(Stored { params, state: token_bucket::State { scaled_tokens, updated_us: now_us } }))?;
            }
            let window_start_us = now_us / (window_ms * 1000) * (window_ms * 1000);
            round_trips(Value::FixedWindow(Stored {
                params: fixed_window::Params { limit: 10, window_ms },
                state: fixed_window::State { window_start_us, count },
            }))?;
            round_trips(Value::SlidingWindow(Stored {
                params: sliding_window::Params { limit: 10, window_ms },
                state: sliding_window::State { window_start_us, current, previous },
            }))?;
        }

        #[test]
        fn warmup_keys_round_trip(rate in prop_oneof![1u64..10_000, 1u64..=2 * MAX_INLINE_WARMUP_RATE, 1u64..1_000_000_000_000],
                                  period_ms in 1u64..315_360_000_000,
                                  warmup_ms in prop_oneof![1u64..3_600_000, 1u64..315_360_000_000], cold_factor in 2u64..=10,
                                  permits in 0u128..600, fraction in any::<u128>(), stored in any::<u128>(),
                                  now_us in 0u64..(1 << 62), ahead in any::<u64>(), next_free in any::<u128>()) {
            let params = warmup::Params { rate, period_ms, warmup_ms, cold_factor };
            let (max, scale) = (params.max_stored(), params.scale());
            let schedule = u128::from(now_us) * u128::from(rate) + u128::from(ahead);
            // Whole permits below cold (a word while under 256), a fraction more, anything.
            let whole = max.saturating_sub(permits * scale);
            for stored in [whole, whole.saturating_sub(1 + fraction % scale), stored % (max + 1), stored] {
                for next_free in [schedule, next_free] {
                    let v = Value::Warmup(Stored { params, state: warmup::State { stored, next_free } });
                    round_trips(v.clone())?;
                    let fits_word = rate <= MAX_INLINE_WARMUP_RATE && stored <= max
                        && (max - stored) % scale == 0 && (max - stored) / scale < 256;
                    prop_assert_eq!(split(&v).is_some(), fits_word);
                    let sb = warmup_stored_bits(&params);
                    let fits_cell = sb <= STATE_BITS && stored >> sb == 0 && next_free >> (STATE_BITS - sb) == 0;
                    prop_assert_eq!(pack(&v, 0).is_some(), fits_cell);
                    // Past the bits from 0, a cell of its own epoch while that spans long enough.
                    let base = cell_base(&v);
                    let epoch = sb + 2 <= STATE_BITS
                        && u128::from(rate) << 30 <= 1u128 << (STATE_BITS - sb - 2);
                    let cell = pack(&v, base);
                    prop_assert_eq!(cell.is_some(), fits_cell || (epoch && stored >> sb == 0));
                    if let Some((p, bits)) = cell {
                        prop_assert!(fits(bits, STATE_BITS));
                        prop_assert_eq!(unpack(&Interned { params: p, base }, bits), v.clone());
                    }
                }
            }
        }

        #[test]
        fn token_buckets_round_trip(capacity in 1u64..1_000_000, interval in any::<bool>(),
                                    tokens in any::<u128>(), small in 0u128..(1 << 42), updated_us in any::<u64>()) {
            for scaled_tokens in [tokens, small] {
                round_trips(Value::TokenBucket(Stored {
                    params: token_bucket::Params { capacity, refill_amount: 3, refill_period_ms: 1000, interval },
                    state: token_bucket::State { scaled_tokens, updated_us },
                }))?;
            }
        }

        #[test]
        fn windows_round_trip(window_ms in 1u64..100_000_000, index in 0u64..(1 << 43), count in any::<u64>(),
                              current in 0u64..(1 << 28), previous in 0u64..(1 << 28), skew in 0u64..2) {
            let window_start_us = index.saturating_mul(window_ms * 1000).saturating_add(skew);
            round_trips(Value::FixedWindow(Stored {
                params: fixed_window::Params { limit: 10, window_ms },
                state: fixed_window::State { window_start_us, count },
            }))?;
            round_trips(Value::SlidingWindow(Stored {
                params: sliding_window::Params { limit: 10, window_ms },
                state: sliding_window::State { window_start_us, current, previous },
            }))?;
        }
    }
}
