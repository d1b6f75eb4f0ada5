//! The conformance vectors of the admission algorithms: what this crate decides for a sequence
//! of requests, written as the module's replies, for every other copy of the algorithms to be
//! held to (the Lua scripts of `clients/lua/`, run by `clients/lua/conformance/run.py`
//! on a server without the module).
//!
//! Each case is one command's parameters, as the command's arguments (durations spelled in the
//! grammar's units), and a sequence of calls on one fresh key: the clock reading in µs, the cost,
//! and the reply, the module's RESP2 array (`[allowed, limit, remaining, retry_after_ms,
//! reset_after_ms]`, and `delay_ms` sixth for the leaky bucket). A cost of 0 asks without
//! writing, as the module's COST 0 does. The cases are drawn from a fixed seed, so the file is
//! the same on every run: this test fails when the crate decides otherwise than the committed
//! file says (a change to an algorithm shows in its diff), and `RATELIMIT_WRITE_VECTORS=1 cargo
//! test -p ratelimit-algorithms --lib vectors` writes it anew.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::fixed_window::{self, FixedWindow};
use crate::gcra::{self, Gcra};
use crate::leaky_bucket::{self, LeakyBucket};
use crate::sliding_log::{self, SlidingLog};
use crate::sliding_window::{self, SlidingWindow};
use crate::token_bucket::{self, TokenBucket};
use crate::warmup::{self, Warmup};
use crate::{Algorithm, Decision};

/// The committed file.
fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients/lua/conformance/replies.json")
}

/// A small deterministic generator (xorshift64*): the vectors must not change between runs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number from `lo` to `hi`, both included.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next() as usize % items.len()]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.range(1, 100) <= percent
    }
}

/// `ms` spelled in one of the units that give it exactly (the grammar of every duration).
fn spell(rng: &mut Rng, ms: u64) -> String {
    let units: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    let mut spellings = vec![format!("{ms}"), format!("{ms}ms")];
    for (scale, unit) in units {
        if ms.is_multiple_of(scale) {
            spellings.push(format!("{}{unit}", ms / scale));
        }
    }
    let i = rng.range(0, spellings.len() as u64 - 1) as usize;
    spellings.swap_remove(i)
}

/// Periods and windows the cases draw from: from a quarter second to a day.
const DURATIONS: [u64; 8] = [250, 1000, 1500, 7000, 60_000, 90_000, 3_600_000, 86_400_000];

/// The reply the module gives for `d` (render.rs's RESP2 array).
fn reply(d: &Decision, delay: bool) -> String {
    let ms = |s: crate::Span| s.ceil_ms().to_string();
    let retry = d.retry_after.map_or("-1".to_string(), ms);
    let mut out = format!(
        "[{},{},{},{},{}",
        u8::from(d.allowed),
        d.limit,
        d.remaining,
        retry,
        ms(d.reset_after)
    );
    if delay {
        let _ = write!(out, ",{}", d.delay.map_or("-1".to_string(), ms));
    }
    out.push(']');
    out
}

/// One case: 16 calls on a fresh key of `A` under `params`, each reply as the module's.
fn case<A: Entry>(
    rng: &mut Rng,
    args: &[String],
    params: A::Params,
    limit: u64,
    period_ms: u64,
) -> String {
    let mut state: Option<A::State> = None;
    let mut now_us = 1_700_000_000_000_000 + rng.range(0, 86_400_000_000);
    let mut calls = Vec::new();
    for _ in 0..16 {
        now_us += match rng.range(1, 100) {
            1..=30 => 0,
            31..=75 => rng.range(1, period_ms * 1000),
            76..=95 => rng.range(period_ms * 1000, 3 * period_ms * 1000),
            _ => rng.range(1, 999),
        };
        let cost = match rng.range(1, 10) {
            1 => 0,
            2..=6 => 1,
            7 => 2,
            _ => rng.range(0, limit + 2),
        };
        let stored = state.as_mut().map(|s| (&params, s));
        let (decision, fresh) = A::check(&params, stored, now_us, cost, cost > 0);
        if let Some(fresh) = fresh {
            state = Some(fresh);
        }
        calls.push(format!("[{now_us},{cost},{}]", reply(&decision, A::DELAY)));
    }
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "{{\"command\": \"{}\", \"args\": [{}], \"calls\": [{}]}}",
        A::COMMAND,
        args.join(", "),
        calls.join(", ")
    )
}

/// One algorithm's entry in the vectors: its command and how a case draws its parameters.
/// A new algorithm is one more implementation and one more line in [`ENTRIES`].
trait Entry: Algorithm {
    /// The command the case's arguments are for.
    const COMMAND: &'static str;
    /// The reply has `delay_ms` sixth (the leaky bucket's).
    const DELAY: bool = false;

    /// Draws one case's parameters: the command's arguments (durations spelled in any unit
    /// that gives them exactly), the parameters they parse to, the limit (the most units a
    /// fresh key admits at once) and the period or window, in ms, that the clock steps go by.
    fn draw(rng: &mut Rng) -> (Vec<String>, Self::Params, u64, u64);
}

impl Entry for Gcra {
    const COMMAND: &'static str = "RL.GCRA";

    fn draw(rng: &mut Rng) -> (Vec<String>, gcra::Params, u64, u64) {
        let period = rng.pick(&DURATIONS);
        let (burst, rate) = (rng.range(1, 20), rng.range(1, 50));
        let args = vec![burst.to_string(), rate.to_string(), spell(rng, period)];
        let params = gcra::Params {
            burst,
            rate,
            period_ms: period,
        };
        (args, params, burst, period)
    }
}

impl Entry for TokenBucket {
    const COMMAND: &'static str = "RL.TOKENBUCKET";

    fn draw(rng: &mut Rng) -> (Vec<String>, token_bucket::Params, u64, u64) {
        let period = rng.pick(&DURATIONS);
        let (capacity, amount, interval) = (rng.range(1, 20), rng.range(1, 10), rng.chance(40));
        let mut args = vec![capacity.to_string(), amount.to_string(), spell(rng, period)];
        if interval {
            args.push("INTERVAL".into());
        }
        let params = token_bucket::Params {
            capacity,
            refill_amount: amount,
            refill_period_ms: period,
            interval,
        };
        (args, params, capacity, period)
    }
}

impl Entry for LeakyBucket {
    const COMMAND: &'static str = "RL.LEAKYBUCKET";
    const DELAY: bool = true;

    fn draw(rng: &mut Rng) -> (Vec<String>, leaky_bucket::Params, u64, u64) {
        let period = rng.pick(&DURATIONS);
        let (capacity, amount) = (rng.range(1, 20), rng.range(1, 10));
        let args = vec![capacity.to_string(), amount.to_string(), spell(rng, period)];
        let params = leaky_bucket::Params {
            capacity,
            leak_amount: amount,
            leak_period_ms: period,
        };
        (args, params, capacity, period)
    }
}

impl Entry for FixedWindow {
    const COMMAND: &'static str = "RL.FIXEDWINDOW";

    fn draw(rng: &mut Rng) -> (Vec<String>, fixed_window::Params, u64, u64) {
        let window = rng.pick(&DURATIONS);
        let limit = rng.range(1, 20);
        let args = vec![limit.to_string(), spell(rng, window)];
        let params = fixed_window::Params {
            limit,
            window_ms: window,
        };
        (args, params, limit, window)
    }
}

impl Entry for SlidingWindow {
    const COMMAND: &'static str = "RL.SLIDINGWINDOW";

    fn draw(rng: &mut Rng) -> (Vec<String>, sliding_window::Params, u64, u64) {
        let window = rng.pick(&DURATIONS);
        let limit = rng.range(1, 20);
        let args = vec![limit.to_string(), spell(rng, window)];
        let params = sliding_window::Params {
            limit,
            window_ms: window,
        };
        (args, params, limit, window)
    }
}

impl Entry for SlidingLog {
    const COMMAND: &'static str = "RL.SLIDINGLOG";

    fn draw(rng: &mut Rng) -> (Vec<String>, sliding_log::Params, u64, u64) {
        let window = rng.pick(&DURATIONS);
        let limit = rng.range(1, 20);
        let args = vec![limit.to_string(), spell(rng, window)];
        let params = sliding_log::Params {
            limit,
            window_ms: window,
        };
        (args, params, limit, window)
    }
}

impl Entry for Warmup {
    const COMMAND: &'static str = "RL.WARMUP";

    fn draw(rng: &mut Rng) -> (Vec<String>, warmup::Params, u64, u64) {
        let period = rng.pick(&DURATIONS);
        let rate = rng.range(1, 20);
        let warmup_ms = period * rng.range(1, 10);
        let cold_factor = if rng.chance(50) {
            warmup::DEFAULT_COLD_FACTOR
        } else {
            rng.range(2, 10)
        };
        let mut args = vec![rate.to_string(), spell(rng, period), spell(rng, warmup_ms)];
        if cold_factor != warmup::DEFAULT_COLD_FACTOR {
            args.extend(["COLDFACTOR".to_string(), cold_factor.to_string()]);
        }
        let params = warmup::Params {
            rate,
            period_ms: period,
            warmup_ms,
            cold_factor,
        };
        (args, params, rate, period)
    }
}

/// A case of `A`: its parameters drawn, then its calls.
fn drawn_case<A: Entry>(rng: &mut Rng) -> String {
    let (args, params, limit, period_ms) = A::draw(rng);
    case::<A>(rng, &args, params, limit, period_ms)
}

/// Every algorithm of the vectors, in the order its cases are drawn.
const ENTRIES: [fn(&mut Rng) -> String; 7] = [
    drawn_case::<Gcra>,
    drawn_case::<TokenBucket>,
    drawn_case::<LeakyBucket>,
    drawn_case::<FixedWindow>,
    drawn_case::<SlidingWindow>,
    drawn_case::<SlidingLog>,
    drawn_case::<Warmup>,
];

/// Every case, one per line.
fn generate() -> String {
    let mut rng = Rng(0x5EED_0FC0_DE20_2026);
    let mut cases = Vec::new();
    for _ in 0..12 {
        for entry in ENTRIES {
            cases.push(entry(&mut rng));
        }
    }
    format!(
        "{{\"generator\": \"algorithms/src/vectors.rs\", \"cases\": [\n{}\n]}}\n",
        cases.join(",\n")
    )
}

#[test]
fn the_committed_vectors_are_what_the_crate_decides() {
    let text = generate();
    if std::env::var_os("RATELIMIT_WRITE_VECTORS").is_some() {
        std::fs::create_dir_all(path().parent().unwrap()).unwrap();
        std::fs::write(path(), &text).unwrap();
    }
    let committed = std::fs::read_to_string(path()).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not what the crate decides now: if the change to the algorithms is meant, \
         write it anew (RATELIMIT_WRITE_VECTORS=1 cargo test -p ratelimit-algorithms --lib \
         vectors) and commit it with the change, then make the scripts agree",
        path().display()
    );
}
