//! Adaptive concurrency limits: Netflix concurrency-limits' `AIMDLimit`, `VegasLimit` and
//! `Gradient2Limit`, as pure state machines.
//!
//! Each takes samples, `(rtt, in flight, dropped)`: how long a piece of work took (in
//! nanoseconds, as Netflix's `Limit.onSample` takes it), how many leases were held when it
//! began (its own included), and whether it failed from overload. Each sample moves the
//! limit the way Netflix's class moves it, with the same parameters and defaults; only the
//! bounds are the caller's (`MIN`, `MAX`). The arithmetic is Java's, step for step: the same
//! `double` operations in the same order (`+ - * /`, comparisons and `ceil`, which IEEE 754
//! rounds exactly and identically on every platform the module runs on; no `log`, `exp` or
//! `pow`), the same `int` truncations, so that a limit computed here equals the Java class's
//! after every sample. The module's comparison against Netflix's own classes is in
//! docs/concurrency.md.
//!
//! The one thing Netflix's code takes from outside is Vegas' probe jitter, a
//! `ThreadLocalRandom` draw in [0.5, 1): here it comes from a seed kept in the state
//! (SplitMix64), so that a replica or an AOF replay that feeds the same samples draws the same
//! jitter.

/// Which of Netflix's limits a key follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `AIMDLimit`: +1 while at least half the limit is in use, × 0.9 on a drop (or an RTT
    /// over 5 s).
    Aimd,
    /// `VegasLimit`: grows or shrinks with the queue estimated from the RTT against the
    /// no-load RTT (probed again every 15 to 30 × limit samples).
    Vegas,
    /// `Gradient2Limit`: the limit times the gradient of a long-term average RTT over the
    /// sample's, plus a queue of 4, smoothed by 0.2.
    Gradient2,
}

impl Kind {
    /// Netflix's default lowest limit (Vegas has none: it stops at 1).
    pub const fn default_min(self) -> u32 {
        match self {
            Kind::Aimd | Kind::Gradient2 => 20,
            Kind::Vegas => 1,
        }
    }

    /// Netflix's default highest limit (`maxLimit`, `maxConcurrency`).
    pub const fn default_max(self) -> u32 {
        match self {
            Kind::Aimd | Kind::Gradient2 => 200,
            Kind::Vegas => 1000,
        }
    }
}

/// The limit's algorithm and bounds: `min <= max`, both at least 1 and at most `i32::MAX`
/// (Netflix's limits are Java `int`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// The algorithm.
    pub kind: Kind,
    /// The lowest the limit goes.
    pub min: u32,
    /// The highest the limit goes.
    pub max: u32,
}

impl Params {
    /// `kind` with Netflix's default bounds, widened to take in `start` (a limit below the
    /// default lowest, or above the default highest, is where the caller wants to be; Netflix
    /// only warns about it).
    pub fn with_defaults(kind: Kind, start: u32, min: Option<u32>, max: Option<u32>) -> Params {
        Params {
            kind,
            min: min.unwrap_or(kind.default_min().min(start)),
            max: max.unwrap_or(kind.default_max().max(start)),
        }
    }
}

/// One piece of work's measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// How long it took, in nanoseconds (at least 1).
    pub rtt_ns: i64,
    /// Leases held when it began, its own included.
    pub inflight: i32,
    /// It failed from overload (timeout, 5xx, cancelled), or its lease ran out.
    pub dropped: bool,
}

/// `AIMDLimit`'s defaults: the backoff ratio and the RTT counted as a drop.
const AIMD_BACKOFF: f64 = 0.9;
const AIMD_TIMEOUT_NS: i64 = 5_000_000_000;
/// `VegasLimit`'s defaults.
const VEGAS_SMOOTHING: f64 = 1.0;
const VEGAS_PROBE_MULTIPLIER: i32 = 30;
/// `Gradient2Limit`'s defaults (its queue size function is a constant 4).
const GRADIENT2_SMOOTHING: f64 = 0.2;
const GRADIENT2_QUEUE: i32 = 4;
const GRADIENT2_TOLERANCE: f64 = 1.5;
/// Its long-term RTT: an `ExpAvgMeasurement(600, 10)`, the mean of the first 10 samples,
/// then an exponential average over 600.
const LONG_WINDOW: i32 = 600;
const LONG_WARMUP: i32 = 10;

/// Vegas' state: `VegasLimit`'s fields.
#[derive(Debug, Clone, Copy)]
pub struct Vegas {
    /// `estimatedLimit`.
    pub estimated: f64,
    /// `rtt_noload`, ns (0: none yet).
    pub rtt_noload_ns: i64,
    /// `probeCount`: samples since the last probe.
    pub probe_count: i32,
    /// `probeJitter`, in [0.5, 1).
    pub probe_jitter: f64,
    /// Where the next jitter draw comes from.
    pub seed: u64,
}

/// Gradient2's state: `Gradient2Limit`'s fields and its long-term RTT measurement's.
#[derive(Debug, Clone, Copy)]
pub struct Gradient2 {
    /// `estimatedLimit`.
    pub estimated: f64,
    /// `lastRtt`, ns: the short-term RTT (the last sample's).
    pub last_rtt_ns: i64,
    /// The long-term RTT's `value`, ns.
    pub long_rtt: f64,
    /// Its `sum` over the first samples.
    pub long_sum: f64,
    /// Its `count` (up to 10).
    pub long_count: i32,
}

/// A key's adaptive limit: the algorithm's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimate {
    /// `AIMDLimit`: the limit itself.
    Aimd {
        /// The limit.
        limit: i32,
    },
    /// `VegasLimit`.
    Vegas(Vegas),
    /// `Gradient2Limit`.
    Gradient2(Gradient2),
}

impl Vegas {
    /// The sample count at which the next probe of the no-load RTT comes: the least count with
    /// `probeJitter × probeMultiplier × estimatedLimit <= probeCount`.
    pub fn probe_at(&self) -> i64 {
        (self.probe_jitter * f64::from(VEGAS_PROBE_MULTIPLIER) * self.estimated).ceil() as i64
    }
}

/// Equal states hold the same bits (a replica's state equals its primary's bit for bit).
impl PartialEq for Vegas {
    fn eq(&self, o: &Vegas) -> bool {
        self.estimated.to_bits() == o.estimated.to_bits()
            && self.rtt_noload_ns == o.rtt_noload_ns
            && self.probe_count == o.probe_count
            && self.probe_jitter.to_bits() == o.probe_jitter.to_bits()
            && self.seed == o.seed
    }
}

impl Eq for Vegas {}

/// Equal states hold the same bits.
impl PartialEq for Gradient2 {
    fn eq(&self, o: &Gradient2) -> bool {
        self.estimated.to_bits() == o.estimated.to_bits()
            && self.last_rtt_ns == o.last_rtt_ns
            && self.long_rtt.to_bits() == o.long_rtt.to_bits()
            && self.long_sum.to_bits() == o.long_sum.to_bits()
            && self.long_count == o.long_count
    }
}

impl Eq for Gradient2 {}

/// SplitMix64's step: the next seed and its output.
fn split_mix(seed: u64) -> (u64, u64) {
    let seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (seed, z ^ (z >> 31))
}

/// A draw in [0.5, 1) as Java's `nextDouble(0.5, 1)` makes one from 64 random bits: 53 of
/// them as a fraction `u` in [0, 1), then `u * (1 - 0.5) + 0.5`, kept below 1.
pub fn jitter(seed: u64) -> (u64, f64) {
    let (seed, bits) = split_mix(seed);
    let u = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    let r = u * (1.0 - 0.5) + 0.5;
    let r = if r >= 1.0 {
        f64::from_bits(1.0f64.to_bits() - 1)
    } else {
        r
    };
    (seed, r)
}

/// Java's `Math.min(double, double)` for the values met here (no NaN: every RTT is positive).
fn min(a: f64, b: f64) -> f64 {
    if a <= b {
        a
    } else {
        b
    }
}

/// Java's `Math.max(double, double)`, likewise.
fn max(a: f64, b: f64) -> f64 {
    if a >= b {
        a
    } else {
        b
    }
}

/// Java's `(int)` of a double: toward zero, saturating (and 0 for NaN), as Rust's `as`.
fn int(x: f64) -> i32 {
    x as i32
}

/// `Log10RootIntFunction` with baseline 0: `max(1, (int) log10(t))` below 1000 (its table),
/// `(int) log10(t)` from 1000 on. For an `int`, `(int) log10(t)` is its number of digits
/// less one (Java's `log10` is exact on powers of ten, and no other int comes within a
/// rounding of one), so no logarithm is computed here.
fn log10_root(t: i32) -> i32 {
    if t < 1000 {
        if t >= 100 {
            2
        } else {
            1
        }
    } else {
        let mut digits = 0;
        let mut n = t;
        while n > 0 {
            n /= 10;
            digits += 1;
        }
        digits - 1
    }
}

impl Estimate {
    /// A key's limit starting at `start` (clamped into the bounds), for `params.kind`; Vegas
    /// draws its first jitter from `seed`.
    pub fn new(params: &Params, start: u32, seed: u64) -> Estimate {
        let start = start.clamp(params.min, params.max.max(params.min));
        let start = i32::try_from(start).unwrap_or(i32::MAX);
        match params.kind {
            Kind::Aimd => Estimate::Aimd { limit: start },
            Kind::Vegas => {
                let (seed, probe_jitter) = jitter(seed);
                Estimate::Vegas(Vegas {
                    estimated: f64::from(start),
                    rtt_noload_ns: 0,
                    probe_count: 0,
                    probe_jitter,
                    seed,
                })
            }
            Kind::Gradient2 => Estimate::Gradient2(Gradient2 {
                estimated: f64::from(start),
                last_rtt_ns: 0,
                long_rtt: 0.0,
                long_sum: 0.0,
                long_count: 0,
            }),
        }
    }

    /// The algorithm this state belongs to.
    pub fn kind(&self) -> Kind {
        match self {
            Estimate::Aimd { .. } => Kind::Aimd,
            Estimate::Vegas(_) => Kind::Vegas,
            Estimate::Gradient2(_) => Kind::Gradient2,
        }
    }

    /// The limit now: Netflix's `getLimit()` (`(int) estimatedLimit`), at least 1.
    pub fn limit(&self) -> u64 {
        let limit = match self {
            Estimate::Aimd { limit } => *limit,
            Estimate::Vegas(v) => int(v.estimated),
            Estimate::Gradient2(g) => int(g.estimated),
        };
        u64::try_from(limit).unwrap_or(0).max(1)
    }

    /// Whether this state is one the algorithm can reach under `params` (a stored state is
    /// checked before it is used: it may come from a crafted `RESTORE` payload).
    pub fn is_valid(&self, params: &Params) -> bool {
        let (lo, hi) = (f64::from(params.min), f64::from(params.max));
        let in_bounds = |e: f64| e.is_finite() && e >= lo && e <= hi;
        self.kind() == params.kind
            && params.min >= 1
            && params.min <= params.max
            && params.max <= i32::MAX as u32
            && match *self {
                Estimate::Aimd { limit } => in_bounds(f64::from(limit)),
                Estimate::Vegas(v) => {
                    in_bounds(v.estimated)
                        && v.rtt_noload_ns >= 0
                        && v.probe_count >= 0
                        && v.probe_jitter >= 0.5
                        && v.probe_jitter < 1.0
                }
                Estimate::Gradient2(g) => {
                    in_bounds(g.estimated)
                        && g.last_rtt_ns >= 0
                        && g.long_rtt.is_finite()
                        && g.long_rtt >= 0.0
                        && g.long_sum.is_finite()
                        && g.long_sum >= 0.0
                        && (0..=LONG_WARMUP).contains(&g.long_count)
                }
            }
    }

    /// Applies new bounds now: the limit is clamped into them (Netflix's limits are never
    /// re-bounded; a key's are, when a call names other bounds).
    pub fn clamp(&mut self, params: &Params) {
        let (lo, hi) = (f64::from(params.min), f64::from(params.max));
        match self {
            Estimate::Aimd { limit } => {
                let lo = i32::try_from(params.min).unwrap_or(i32::MAX);
                let hi = i32::try_from(params.max).unwrap_or(i32::MAX);
                *limit = (*limit).min(hi).max(lo);
            }
            Estimate::Vegas(Vegas { estimated, .. })
            | Estimate::Gradient2(Gradient2 { estimated, .. }) => {
                *estimated = max(lo, min(hi, *estimated));
            }
        }
    }

    /// Takes one sample: Netflix's `onSample`, which sets the limit to `_update`'s answer.
    pub fn update(&mut self, params: &Params, sample: Sample) {
        let rtt = sample.rtt_ns.max(1);
        let inflight = sample.inflight;
        let (min_limit, max_limit) = (
            i32::try_from(params.min).unwrap_or(i32::MAX),
            i32::try_from(params.max).unwrap_or(i32::MAX),
        );
        match self {
            Estimate::Aimd { limit } => {
                let mut current = *limit;
                if sample.dropped || rtt > AIMD_TIMEOUT_NS {
                    current = int(f64::from(current) * AIMD_BACKOFF);
                } else if inflight.saturating_mul(2) >= current {
                    current = current.saturating_add(1);
                }
                *limit = max_limit.min(min_limit.max(current));
            }
            Estimate::Vegas(v) => vegas(v, min_limit, max_limit, rtt, inflight, sample.dropped),
            Estimate::Gradient2(g) => gradient2(g, min_limit, max_limit, rtt, inflight),
        }
    }
}

/// `VegasLimit._update` (with its lowest limit, 1 in Netflix's code, made `min_limit`).
fn vegas(v: &mut Vegas, min_limit: i32, max_limit: i32, rtt: i64, inflight: i32, dropped: bool) {
    v.probe_count = v.probe_count.saturating_add(1);
    // shouldProbe(): probeJitter * probeMultiplier * estimatedLimit <= probeCount
    if v.probe_jitter * f64::from(VEGAS_PROBE_MULTIPLIER) * v.estimated <= f64::from(v.probe_count)
    {
        let (seed, next) = jitter(v.seed);
        v.seed = seed;
        v.probe_jitter = next;
        v.probe_count = 0;
        v.rtt_noload_ns = rtt;
        return;
    }
    let rtt_noload = v.rtt_noload_ns;
    if rtt_noload == 0 || rtt < rtt_noload {
        v.rtt_noload_ns = rtt;
        return;
    }
    // updateEstimatedLimit
    let estimated = v.estimated;
    let queue_size = int((estimated * (1.0 - rtt_noload as f64 / rtt as f64)).ceil());
    let decrease = |limit: f64| limit - f64::from(log10_root(int(limit)));
    let new_limit = if dropped {
        decrease(estimated)
    } else if f64::from(inflight.saturating_mul(2)) < estimated {
        return;
    } else {
        let log = log10_root(int(estimated));
        let (alpha, beta, threshold) = (3 * log, 6 * log, log);
        if queue_size <= threshold {
            estimated + f64::from(beta)
        } else if queue_size < alpha {
            estimated + f64::from(log10_root(int(estimated)))
        } else if queue_size > beta {
            decrease(estimated)
        } else {
            return;
        }
    };
    let new_limit = max(f64::from(min_limit), min(f64::from(max_limit), new_limit));
    v.estimated = (1.0 - VEGAS_SMOOTHING) * estimated + VEGAS_SMOOTHING * new_limit;
}

/// `Gradient2Limit._update`.
fn gradient2(g: &mut Gradient2, min_limit: i32, max_limit: i32, rtt: i64, inflight: i32) {
    let estimated = g.estimated;
    let queue_size = f64::from(GRADIENT2_QUEUE);
    g.last_rtt_ns = rtt;
    let short_rtt = rtt as f64;
    // ExpAvgMeasurement.add
    if g.long_count < LONG_WARMUP {
        g.long_count += 1;
        g.long_sum += rtt as f64;
        g.long_rtt = g.long_sum / f64::from(g.long_count);
    } else {
        let factor = 2.0 / f64::from(LONG_WINDOW + 1);
        g.long_rtt = g.long_rtt * (1.0 - factor) + rtt as f64 * factor;
    }
    let long_rtt = g.long_rtt;
    if long_rtt / short_rtt > 2.0 {
        g.long_rtt *= 0.95;
    }
    if f64::from(inflight) < estimated / 2.0 {
        return;
    }
    let gradient = max(0.5, min(1.0, GRADIENT2_TOLERANCE * long_rtt / short_rtt));
    let new_limit = estimated * gradient + queue_size;
    let new_limit = estimated * (1.0 - GRADIENT2_SMOOTHING) + new_limit * GRADIENT2_SMOOTHING;
    g.estimated = max(f64::from(min_limit), min(f64::from(max_limit), new_limit));
}

#[cfg(test)]
mod tests;
