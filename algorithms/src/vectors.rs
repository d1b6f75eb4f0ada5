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
//! test --release -p ratelimit-algorithms --lib vectors` writes it anew.
//!
//! [`sequences`] writes `clients/lua/conformance/sequences.json` the same way: the options,
//! RL.REFUND, policies, leases and the ranges' edges.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::fixed_window::{self, FixedWindow};
use crate::gcra::{self, Gcra};
use crate::leaky_bucket::{self, LeakyBucket};
use crate::rule_set::Rule;
use crate::sliding_log::{self, SlidingLog};
use crate::sliding_window::{self, SlidingWindow};
use crate::token_bucket::{self, TokenBucket};
use crate::warmup::{self, Warmup};
use crate::{Algorithm, Decision};

mod sequences;

/// A committed file of `clients/lua/conformance/`.
fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../clients/lua/conformance")
        .join(name)
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

/// The edges of the ranges ([`crate::limits`]): the durations and counts of the wide cases.
mod wide {
    use super::Rng;
    use crate::ranges::{MAX_COUNT, MAX_DURATION_MS};

    /// 2^53: a double's exact integers end here (the scripts' plain numbers).
    const EXACT: u64 = 1 << 53;

    /// A duration in ms: the shortest, a window either side of 2^29 and 2^30 µs (where a
    /// sliding log's unit doubles), a day, a year, ten years (the longest), or any.
    pub fn duration(rng: &mut Rng) -> u64 {
        let edges = [
            1,
            2,
            999,
            1000,
            60_000,
            536_870,
            536_871,
            1_073_741,
            1_073_742,
            86_400_000,
            31_536_000_000,
            MAX_DURATION_MS,
        ];
        if rng.chance(15) {
            rng.range(1, MAX_DURATION_MS)
        } else {
            rng.pick(&edges)
        }
    }

    /// A count in 1..=10^12 for a duration of `ms`: small, the largest, or one whose product
    /// with the duration lies a few units either side of where the scripts' arithmetic
    /// changes (clients/lua/README.md, "Ranges" and "One source": a product of 2^53 µs or ms,
    /// the general path's 9 × 10^12, a fast path's 2^49 µs), or any.
    pub fn count(rng: &mut Rng, ms: u64) -> u64 {
        let near = |rng: &mut Rng, x: u64| x.saturating_add(rng.range(0, 4)).saturating_sub(2);
        let us = ms.saturating_mul(1000);
        let c = match rng.range(1, 9) {
            1 => 1,
            2 => rng.range(2, 20),
            3 => MAX_COUNT - rng.range(0, 2),
            4 => near(rng, EXACT / us),
            5 => near(rng, 9_000_000_000_000 / ms),
            6 => near(rng, (1 << 49) / us),
            7 => near(rng, EXACT / ms),
            8 => near(rng, 1 << 32),
            _ => rng.range(1, MAX_COUNT),
        };
        c.clamp(1, MAX_COUNT)
    }
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
    /// The script that stands for it (`clients/lua/<SCRIPT>.lua`).
    const SCRIPT: &'static str;
    /// The reply has `delay_ms` sixth (the leaky bucket's).
    const DELAY: bool = false;

    /// Draws one case's parameters: the command's arguments (durations spelled in any unit
    /// that gives them exactly), the parameters they parse to, the limit (the most units a
    /// fresh key admits at once) and the period or window, in ms, that the clock steps go by.
    fn draw(rng: &mut Rng) -> (Vec<String>, Self::Params, u64, u64);

    /// Draws parameters as [`Entry::draw`] does, at the edges of the ranges (counts up to
    /// 10^12, durations up to ten years, products near 2^53: [`wide`]).
    fn draw_wide(rng: &mut Rng) -> (Vec<String>, Self::Params, u64, u64);

    /// The parameters as a policy's rule.
    fn rule(params: Self::Params) -> Rule;
}

impl Entry for Gcra {
    const COMMAND: &'static str = "RL.GCRA";
    const SCRIPT: &'static str = "gcra";

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

    fn draw_wide(rng: &mut Rng) -> (Vec<String>, gcra::Params, u64, u64) {
        let period = wide::duration(rng);
        let burst = wide::count(rng, period);
        let rate = wide::count(rng, period);
        let args = vec![burst.to_string(), rate.to_string(), spell(rng, period)];
        let params = gcra::Params {
            burst,
            rate,
            period_ms: period,
        };
        (args, params, burst, period)
    }

    fn rule(params: gcra::Params) -> Rule {
        Rule::Gcra(params)
    }
}

impl Entry for TokenBucket {
    const COMMAND: &'static str = "RL.TOKENBUCKET";
    const SCRIPT: &'static str = "tokenbucket";

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

    fn draw_wide(rng: &mut Rng) -> (Vec<String>, token_bucket::Params, u64, u64) {
        let period = wide::duration(rng);
        let (capacity, amount) = (wide::count(rng, period), wide::count(rng, period));
        let interval = rng.chance(40);
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

    fn rule(params: token_bucket::Params) -> Rule {
        Rule::TokenBucket(params)
    }
}

impl Entry for LeakyBucket {
    const COMMAND: &'static str = "RL.LEAKYBUCKET";
    const SCRIPT: &'static str = "leakybucket";
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

    fn draw_wide(rng: &mut Rng) -> (Vec<String>, leaky_bucket::Params, u64, u64) {
        let period = wide::duration(rng);
        let (capacity, amount) = (wide::count(rng, period), wide::count(rng, period));
        let args = vec![capacity.to_string(), amount.to_string(), spell(rng, period)];
        let params = leaky_bucket::Params {
            capacity,
            leak_amount: amount,
            leak_period_ms: period,
        };
        (args, params, capacity, period)
    }

    fn rule(params: leaky_bucket::Params) -> Rule {
        Rule::LeakyBucket(params)
    }
}

impl Entry for FixedWindow {
    const COMMAND: &'static str = "RL.FIXEDWINDOW";
    const SCRIPT: &'static str = "fixedwindow";

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

    fn draw_wide(rng: &mut Rng) -> (Vec<String>, fixed_window::Params, u64, u64) {
        let window = wide::duration(rng);
        let limit = wide::count(rng, window);
        let args = vec![limit.to_string(), spell(rng, window)];
        let params = fixed_window::Params {
            limit,
            window_ms: window,
        };
        (args, params, limit, window)
    }

    fn rule(params: fixed_window::Params) -> Rule {
        Rule::FixedWindow(params)
    }
}

impl Entry for SlidingWindow {
    const COMMAND: &'static str = "RL.SLIDINGWINDOW";
    const SCRIPT: &'static str = "slidingwindow";

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

    fn draw_wide(rng: &mut Rng) -> (Vec<String>, sliding_window::Params, u64, u64) {
        let window = wide::duration(rng);
        let limit = wide::count(rng, window);
        let args = vec![limit.to_string(), spell(rng, window)];
        let params = sliding_window::Params {
            limit,
            window_ms: window,
        };
        (args, params, limit, window)
    }

    fn rule(params: sliding_window::Params) -> Rule {
        Rule::SlidingWindow(params)
    }
}

impl Entry for SlidingLog {
    const COMMAND: &'static str = "RL.SLIDINGLOG";
    const SCRIPT: &'static str = "slidinglog";

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

    /// The limit at most 1000000: the script's range (clients/lua/README.md, "Ranges": the
    /// module's setting `sliding-log-max-limit` at its default).
    fn draw_wide(rng: &mut Rng) -> (Vec<String>, sliding_log::Params, u64, u64) {
        let window = wide::duration(rng);
        let limit = wide::count(rng, window).min(1_000_000);
        let args = vec![limit.to_string(), spell(rng, window)];
        let params = sliding_log::Params {
            limit,
            window_ms: window,
        };
        (args, params, limit, window)
    }

    fn rule(params: sliding_log::Params) -> Rule {
        Rule::SlidingLog(params)
    }
}

impl Entry for Warmup {
    const COMMAND: &'static str = "RL.WARMUP";
    const SCRIPT: &'static str = "warmup";

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

    fn draw_wide(rng: &mut Rng) -> (Vec<String>, warmup::Params, u64, u64) {
        let period = wide::duration(rng);
        let rate = wide::count(rng, period);
        let warmup_ms = match rng.range(1, 3) {
            1 => crate::ranges::MAX_DURATION_MS,
            2 => period.saturating_mul(rng.range(1, 10)),
            _ => wide::duration(rng),
        }
        .min(crate::ranges::MAX_DURATION_MS);
        let cold_factor = rng.range(2, 10);
        let mut args = vec![rate.to_string(), spell(rng, period), spell(rng, warmup_ms)];
        if cold_factor != warmup::DEFAULT_COLD_FACTOR || rng.chance(50) {
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

    fn rule(params: warmup::Params) -> Rule {
        Rule::Warmup(params)
    }
}

/// A case of `A`: its parameters drawn, then its calls.
fn drawn_case<A: Entry>(rng: &mut Rng) -> String {
    let (args, params, limit, period_ms) = A::draw(rng);
    case::<A>(rng, &args, params, limit, period_ms)
}

/// A policy's rule as drawn: the rule's words after its name, the rule, its limit and its
/// period or window (ms).
type DrawnRule = (Vec<String>, Rule, u64, u64);

/// A policy's rule drawn as [`Entry::draw`] draws its algorithm's parameters.
fn drawn_rule<A: Entry>(rng: &mut Rng) -> DrawnRule {
    let (args, params, limit, period_ms) = A::draw(rng);
    (args, A::rule(params), limit, period_ms)
}

/// One algorithm's entry in the table: its command and the cases drawn of it.
struct Kind {
    command: &'static str,
    /// A case of replies.json.
    replies: fn(&mut Rng) -> String,
    /// A case of sequences.json, at the ranges' edges or not ([`sequences::admissions`]).
    sequence: fn(&mut Rng, bool) -> Option<String>,
    /// A rule of a policy ([`sequences::policy`]).
    rule: fn(&mut Rng) -> DrawnRule,
}

const fn kind<A: Entry>() -> Kind {
    Kind {
        command: A::COMMAND,
        replies: drawn_case::<A>,
        sequence: sequences::admissions::<A>,
        rule: drawn_rule::<A>,
    }
}

/// Every algorithm of the vectors, in the order its cases are drawn.
const ENTRIES: [Kind; 7] = [
    kind::<Gcra>(),
    kind::<TokenBucket>(),
    kind::<LeakyBucket>(),
    kind::<FixedWindow>(),
    kind::<SlidingWindow>(),
    kind::<SlidingLog>(),
    kind::<Warmup>(),
];

/// Every case, one per line.
fn generate() -> String {
    let mut rng = Rng(0x5EED_0FC0_DE20_2026);
    let mut cases = Vec::new();
    for _ in 0..12 {
        for entry in &ENTRIES {
            cases.push((entry.replies)(&mut rng));
        }
    }
    format!(
        "{{\"generator\": \"algorithms/src/vectors.rs\", \"cases\": [\n{}\n]}}\n",
        cases.join(",\n")
    )
}

/// Fails when the committed file `name` is not `text`; writes it first when
/// `RATELIMIT_WRITE_VECTORS` is set.
fn check_committed(name: &str, text: &str) {
    let path = path(name);
    if std::env::var_os("RATELIMIT_WRITE_VECTORS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not what the crate decides now: if the change to the algorithms is meant, \
         write it anew (RATELIMIT_WRITE_VECTORS=1 cargo test --release -p \
         ratelimit-algorithms --lib vectors) and commit it with the change, then make the \
         scripts agree",
        path.display()
    );
}

#[test]
fn the_committed_vectors_are_what_the_crate_decides() {
    check_committed("replies.json", &generate());
}

#[test]
fn the_committed_sequences_are_what_the_crate_decides() {
    check_committed("sequences.json", &sequences::generate());
}
