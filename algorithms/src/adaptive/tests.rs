//! The adaptive limits against worked examples (computed by hand from Netflix's classes) and
//! against a reference model: the three classes transcribed again, as Java objects with
//! Java's field names, fed the same jitter draws from a list. Netflix's own classes, compiled
//! with `javac`, are compared in docs/concurrency.md (a measurement, not a test here: their
//! code is not in this repository).

use super::*;
use proptest::prelude::*;

const MS: i64 = 1_000_000;

fn sample(rtt_ns: i64, inflight: i32, dropped: bool) -> Sample {
    Sample {
        rtt_ns,
        inflight,
        dropped,
    }
}

fn params(kind: Kind, min: u32, max: u32) -> Params {
    Params { kind, min, max }
}

/// Feeds `samples` and answers the limit after each.
fn limits(params: &Params, start: u32, seed: u64, samples: &[Sample]) -> Vec<u64> {
    let mut e = Estimate::new(params, start, seed);
    samples
        .iter()
        .map(|s| {
            e.update(params, *s);
            e.limit()
        })
        .collect()
}

#[test]
fn aimd_adds_one_while_half_is_used_and_backs_off_by_a_tenth() {
    let p = params(Kind::Aimd, 20, 200);
    let got = limits(
        &p,
        20,
        0,
        &[
            sample(10 * MS, 10, false),        // 10 × 2 >= 20: 21
            sample(10 * MS, 10, false),        // 20 < 21: stays
            sample(10 * MS, 11, false),        // 22 >= 21: 22
            sample(10 * MS, 11, true),         // dropped: (int) (22 × 0.9) = 19, at least 20
            sample(5_000 * MS, 10, false),     // 5 s is not over the timeout: 21
            sample(5_000 * MS + 1, 10, false), // over it: a drop, (int) 18.9 = 18 → 20
        ],
    );
    assert_eq!(got, [21, 21, 22, 20, 21, 20]);
    let p = params(Kind::Aimd, 1, 200);
    assert_eq!(
        limits(&p, 100, 0, &[sample(MS, 1, true), sample(MS, 1, true)]),
        [90, 81]
    );
    // The top: 200, then no more.
    assert_eq!(
        limits(
            &p,
            199,
            0,
            &[sample(MS, 150, false), sample(MS, 150, false)]
        ),
        [200, 200]
    );
}

#[test]
fn vegas_takes_the_no_load_rtt_then_grows_without_a_queue_and_shrinks_with_one() {
    let p = params(Kind::Vegas, 1, 1000);
    let got = limits(
        &p,
        20,
        7,
        &[
            sample(10 * MS, 10, false), // the first RTT is the no-load RTT: 20
            sample(10 * MS, 10, false), // queue ceil(20 × (1 − 10/10)) = 0 <= 1: + beta 6
            sample(20 * MS, 13, false), // queue ceil(26 × 0.5) = 13 > beta 6: − 1
            sample(20 * MS, 12, false), // 12 × 2 < 25: app-limited, stays
            sample(20 * MS, 13, true),  // dropped: − log10 = − 1
            sample(5 * MS, 13, false),  // a lower RTT: the new no-load RTT, stays
        ],
    );
    assert_eq!(got, [20, 26, 25, 25, 24, 24]);
    // From 100 on, log10 is 2: alpha 6, beta 12, threshold 2.
    let got = limits(
        &p,
        100,
        7,
        &[
            sample(10 * MS, 50, false),
            sample(10 * MS, 50, false),    // no queue: + 12
            sample(11 * MS, 56, false),    // ceil(112 × 1/11) = 11, between 6 and 12: stays
            sample(10_500_000, 56, false), // ceil(112 × 0.5/10.5) = 6, not < 6: stays
            sample(10_400_000, 56, false), // ceil(112 × 0.4/10.4) = 5 < alpha: + 2
        ],
    );
    assert_eq!(got, [100, 112, 112, 112, 114]);
}

#[test]
fn vegas_probes_the_no_load_rtt_again_after_its_jittered_count() {
    let p = params(Kind::Vegas, 1, 1000);
    let start = Estimate::new(&p, 10, 42);
    let Estimate::Vegas(v) = start else {
        unreachable!()
    };
    // jitter × 30 × 10 samples, rounded up: the probe's sample.
    let probe_at = (v.probe_jitter * 30.0 * 10.0).ceil() as i32;
    assert!((150..=300).contains(&probe_at), "{probe_at}");
    assert_eq!(v.probe_at(), i64::from(probe_at), "RL.INSPECT's probe_at");
    let mut e = start;
    e.update(&p, sample(10 * MS, 1, false));
    for _ in 2..probe_at {
        e.update(&p, sample(50 * MS, 1, false)); // app-limited: nothing moves
    }
    let Estimate::Vegas(before) = e else {
        unreachable!()
    };
    assert_eq!(
        (before.rtt_noload_ns, before.probe_count),
        (10 * MS, probe_at - 1)
    );
    e.update(&p, sample(50 * MS, 1, false));
    let Estimate::Vegas(after) = e else {
        unreachable!()
    };
    // The probe takes this sample's RTT as the no-load RTT and draws the next jitter.
    assert_eq!((after.rtt_noload_ns, after.probe_count), (50 * MS, 0));
    assert_eq!(after.probe_jitter, jitter(v.seed).1);
    assert_eq!(after.seed, jitter(v.seed).0);
}

#[test]
fn gradient2_moves_by_the_gradient_plus_a_queue_of_four_smoothed() {
    let p = params(Kind::Gradient2, 20, 200);
    let mut e = Estimate::new(&p, 20, 0);
    let mut estimates = Vec::new();
    for _ in 0..3 {
        e.update(&p, sample(10 * MS, 12, false)); // at least half the limit in flight
        let Estimate::Gradient2(g) = e else {
            unreachable!()
        };
        estimates.push(g.estimated);
    }
    // 20 × 0.8 + (20 × 1 + 4) × 0.2 = 20.8; then 21.6; then 22.4 (the gradient is capped
    // at 1 while the long RTT equals the short one).
    let expected = [20.8, 21.6, 22.4];
    for (got, want) in estimates.iter().zip(expected) {
        assert!((got - want).abs() < 1e-9, "{estimates:?}");
    }
    assert_eq!(e.limit(), 22);
    // Latency doubles: the long RTT (a mean while it warms up) lags, the gradient is
    // 1.5 × long / short, below 1.
    e.update(&p, sample(40 * MS, 30, false));
    let Estimate::Gradient2(g) = e else {
        unreachable!()
    };
    // long = (3 × 10 + 40) / 4 = 17.5 ms; gradient = 1.5 × 17.5 / 40 = 0.65625;
    // 22.4 × 0.8 + (22.4 × 0.65625 + 4) × 0.2 = 17.92 + 3.74 = 21.66
    assert!((g.long_rtt - 17.5 * MS as f64).abs() < 1e-3);
    assert!((g.estimated - 21.66).abs() < 1e-9, "{}", g.estimated);
    // Below half the limit in flight: app-limited, the limit stays.
    e.update(&p, sample(40 * MS, 10, false));
    assert_eq!(e.limit(), 21);
}

#[test]
fn bounds_default_to_netflix_and_take_in_the_start() {
    let aimd = Params::with_defaults(Kind::Aimd, 20, None, None);
    assert_eq!((aimd.min, aimd.max), (20, 200));
    let aimd = Params::with_defaults(Kind::Aimd, 4, None, None);
    assert_eq!((aimd.min, aimd.max), (4, 200));
    let vegas = Params::with_defaults(Kind::Vegas, 5000, None, Some(8000));
    assert_eq!((vegas.min, vegas.max), (1, 8000));
    let g2 = Params::with_defaults(Kind::Gradient2, 500, Some(2), None);
    assert_eq!((g2.min, g2.max), (2, 500));
    // A start outside explicit bounds starts at the nearer bound.
    assert_eq!(Estimate::new(&params(Kind::Aimd, 5, 10), 50, 0).limit(), 10);
    assert_eq!(Estimate::new(&params(Kind::Vegas, 5, 10), 1, 0).limit(), 5);
}

#[test]
fn log10_root_is_netflix_table_and_its_log10() {
    let cases = [
        (0, 1),
        (1, 1),
        (9, 1),
        (10, 1),
        (99, 1),
        (100, 2),
        (999, 2),
        (1000, 3),
        (9999, 3),
        (10_000, 4),
        (99_999_999, 7),
        (100_000_000, 8),
        (i32::MAX, 9),
    ];
    for (t, want) in cases {
        assert_eq!(log10_root(t), want, "{t}");
    }
}

#[test]
fn jitter_is_in_its_range_and_the_same_for_the_same_seed() {
    let mut seed = 0;
    for _ in 0..10_000 {
        let (next, j) = jitter(seed);
        assert!((0.5..1.0).contains(&j));
        assert_eq!(jitter(seed), (next, j));
        seed = next;
    }
}

/// The reference model: Netflix's three classes, written again as Java objects would hold
/// them, with Java's field names and its operations in its order.
mod reference {
    use super::super::jitter;

    pub struct Aimd {
        pub limit: i32,
        pub min_limit: i32,
        pub max_limit: i32,
    }

    impl Aimd {
        pub fn on_sample(&mut self, rtt: i64, inflight: i32, did_drop: bool) {
            let mut current_limit = self.limit;
            if did_drop || rtt > 5_000_000_000 {
                current_limit = (current_limit as f64 * 0.9) as i32;
            } else if inflight * 2 >= current_limit {
                current_limit += 1;
            }
            self.limit = self.max_limit.min(self.min_limit.max(current_limit));
        }
    }

    pub struct Vegas {
        pub estimated_limit: f64,
        pub rtt_noload: i64,
        pub max_limit: i32,
        pub probe_count: i32,
        pub probe_jitter: f64,
        pub draws: Vec<f64>,
        pub seed: u64,
    }

    fn log10(t: i32) -> i32 {
        // Java: Math.max(1, (int) Math.log10(t)) in its table, (int) Math.log10(t) above.
        let l = (t as f64).log10() as i32;
        if t < 1000 {
            l.max(1)
        } else {
            l
        }
    }

    impl Vegas {
        pub fn new(initial: i32, max_limit: i32, seed: u64) -> Vegas {
            let mut v = Vegas {
                estimated_limit: initial as f64,
                rtt_noload: 0,
                max_limit,
                probe_count: 0,
                probe_jitter: 0.0,
                draws: Vec::new(),
                seed,
            };
            v.reset_probe_jitter();
            v
        }

        fn reset_probe_jitter(&mut self) {
            let (seed, j) = jitter(self.seed);
            self.seed = seed;
            self.draws.push(j);
            self.probe_jitter = j;
        }

        pub fn limit(&self) -> i32 {
            self.estimated_limit as i32
        }

        pub fn on_sample(&mut self, rtt: i64, inflight: i32, did_drop: bool) {
            self.probe_count += 1;
            if self.probe_jitter * 30.0 * self.estimated_limit <= self.probe_count as f64 {
                self.reset_probe_jitter();
                self.probe_count = 0;
                self.rtt_noload = rtt;
                return;
            }
            let rtt_noload = self.rtt_noload;
            if rtt_noload == 0 || rtt < rtt_noload {
                self.rtt_noload = rtt;
                return;
            }
            let estimated_limit = self.estimated_limit;
            let queue_size =
                (estimated_limit * (1.0 - rtt_noload as f64 / rtt as f64)).ceil() as i32;
            let mut new_limit;
            if did_drop {
                new_limit = estimated_limit - log10(estimated_limit as i32) as f64;
            } else if ((inflight * 2) as f64) < estimated_limit {
                return;
            } else {
                let alpha = 3 * log10(estimated_limit as i32);
                let beta = 6 * log10(estimated_limit as i32);
                let threshold = log10(estimated_limit as i32);
                if queue_size <= threshold {
                    new_limit = estimated_limit + beta as f64;
                } else if queue_size < alpha {
                    new_limit = estimated_limit + log10(estimated_limit as i32) as f64;
                } else if queue_size > beta {
                    new_limit = estimated_limit - log10(estimated_limit as i32) as f64;
                } else {
                    return;
                }
            }
            new_limit = 1f64.max((self.max_limit as f64).min(new_limit));
            let smoothing = 1.0;
            new_limit = (1.0 - smoothing) * estimated_limit + smoothing * new_limit;
            self.estimated_limit = new_limit;
        }
    }

    pub struct Gradient2 {
        pub estimated_limit: f64,
        pub min_limit: i32,
        pub max_limit: i32,
        pub value: f64,
        pub sum: f64,
        pub count: i32,
    }

    impl Gradient2 {
        pub fn limit(&self) -> i32 {
            self.estimated_limit as i32
        }

        pub fn on_sample(&mut self, rtt: i64, inflight: i32) {
            let estimated_limit = self.estimated_limit;
            let queue_size = 4.0;
            let short_rtt = rtt as f64;
            if self.count < 10 {
                self.count += 1;
                self.sum += rtt as f64;
                self.value = self.sum / self.count as f64;
            } else {
                let factor = 2.0 / (600 + 1) as f64;
                self.value = self.value * (1.0 - factor) + rtt as f64 * factor;
            }
            let long_rtt = self.value;
            if long_rtt / short_rtt > 2.0 {
                self.value *= 0.95;
            }
            if (inflight as f64) < estimated_limit / 2.0 {
                return;
            }
            let gradient = 0.5f64.max(1.0f64.min(1.5 * long_rtt / short_rtt));
            let mut new_limit = estimated_limit * gradient + queue_size;
            new_limit = estimated_limit * (1.0 - 0.2) + new_limit * 0.2;
            new_limit = (self.min_limit as f64).max((self.max_limit as f64).min(new_limit));
            self.estimated_limit = new_limit;
        }
    }
}

/// Samples as a service under changing load produces them: RTTs around a base that drifts,
/// bursts of queueing, some drops and timeouts, in-flight counts low and high.
fn samples() -> impl Strategy<Value = Vec<Sample>> {
    prop::collection::vec(
        (1i64..=400, 1i32..=400, 0u8..20, 0u8..50).prop_map(|(rtt_ms4, inflight, drop, slow)| {
            let rtt_ns = rtt_ms4 * 250_000 + i64::from(slow == 0) * 5_000_000_000;
            sample(rtt_ns, inflight, drop == 0)
        }),
        1..600,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn aimd_is_the_reference_after_every_sample(
        start in 1u32..300, min in 1u32..50, spread in 0u32..300, samples in samples()
    ) {
        let p = params(Kind::Aimd, min, min + spread);
        let mut e = Estimate::new(&p, start, 0);
        let mut r = reference::Aimd {
            limit: start.clamp(p.min, p.max) as i32,
            min_limit: p.min as i32,
            max_limit: p.max as i32,
        };
        for s in samples {
            e.update(&p, s);
            r.on_sample(s.rtt_ns, s.inflight, s.dropped);
            prop_assert_eq!(e, Estimate::Aimd { limit: r.limit });
        }
    }

    #[test]
    fn vegas_is_the_reference_after_every_sample(
        start in 1u32..300, max in 1u32..2000, seed: u64, samples in samples()
    ) {
        let p = params(Kind::Vegas, 1, max);
        let mut e = Estimate::new(&p, start, seed);
        let mut r = reference::Vegas::new(start.min(max) as i32, max as i32, seed);
        for s in samples {
            e.update(&p, s);
            r.on_sample(s.rtt_ns, s.inflight, s.dropped);
            let Estimate::Vegas(v) = e else { unreachable!() };
            prop_assert_eq!(v.estimated.to_bits(), r.estimated_limit.to_bits());
            prop_assert_eq!(v.rtt_noload_ns, r.rtt_noload);
            prop_assert_eq!(v.probe_count, r.probe_count);
            prop_assert_eq!(v.probe_jitter.to_bits(), r.probe_jitter.to_bits());
            prop_assert_eq!(e.limit(), r.limit().max(1) as u64);
        }
    }

    #[test]
    fn gradient2_is_the_reference_after_every_sample(
        start in 1u32..300, min in 1u32..50, spread in 0u32..300, samples in samples()
    ) {
        let p = params(Kind::Gradient2, min, min + spread);
        let mut e = Estimate::new(&p, start, 0);
        let mut r = reference::Gradient2 {
            estimated_limit: f64::from(start.clamp(p.min, p.max)),
            min_limit: p.min as i32,
            max_limit: p.max as i32,
            value: 0.0,
            sum: 0.0,
            count: 0,
        };
        for s in samples {
            e.update(&p, s);
            r.on_sample(s.rtt_ns, s.inflight);
            let Estimate::Gradient2(g) = e else { unreachable!() };
            prop_assert_eq!(g.estimated.to_bits(), r.estimated_limit.to_bits());
            prop_assert_eq!(g.long_rtt.to_bits(), r.value.to_bits());
            prop_assert_eq!(e.limit(), r.limit() as u64);
            prop_assert!(e.is_valid(&p));
        }
    }
}
