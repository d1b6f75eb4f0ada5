//! Writes sample sequences and this crate's limits after every sample, as a trace that an
//! oracle replays through Netflix concurrency-limits' own classes (see docs/concurrency.md,
//! "Exact against Netflix's classes"):
//!
//! ```text
//! SEQ <AIMD|VEGAS|GRADIENT2> <initial> <min> <max>
//! J 0x<jitter bits, 16 hex digits>         (a Vegas jitter draw, before the sample that takes it)
//! S <rtt_ns> <inflight> <dropped 0|1> <limit> <estimate bits> [<rtt_noload_ns> | <long rtt bits>]
//! ```
//!
//! `cargo run --release -p ratelimit-algorithms --example adaptive_trace -- SEQUENCES SAMPLES SEED`

use ratelimit_algorithms::adaptive::{Estimate, Kind, Params, Sample};

/// SplitMix64, for the samples (not the jitter, which is the crate's own).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn name(kind: Kind) -> &'static str {
    match kind {
        Kind::Aimd => "AIMD",
        Kind::Vegas => "VEGAS",
        Kind::Gradient2 => "GRADIENT2",
    }
}

fn jitter_of(e: &Estimate) -> Option<(u64, f64)> {
    match e {
        Estimate::Vegas(v) => Some((v.seed, v.probe_jitter)),
        _ => None,
    }
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("SEQUENCES SAMPLES SEED"))
        .collect();
    let (sequences, samples, seed) = match args[..] {
        [a, b, c] => (a, b, c),
        _ => (300, 2000, 1),
    };
    let mut rng = Rng(seed);
    for n in 0..sequences {
        let kind = [Kind::Aimd, Kind::Vegas, Kind::Gradient2][(n % 3) as usize];
        // Starts and bounds across Netflix's defaults and past 1000 (where log10 is 3).
        let span = if rng.below(4) == 0 { 3000 } else { 300 };
        let start = 1 + rng.below(span) as u32;
        let explicit = rng.below(2) == 0;
        let min = match kind {
            Kind::Vegas => None,
            _ if explicit => Some(1 + rng.below(40) as u32),
            _ => None,
        };
        let max = explicit.then(|| min.unwrap_or(1) + rng.below(4000) as u32);
        let params = Params::with_defaults(kind, start, min, max);
        let initial = start.clamp(params.min, params.max);
        println!(
            "SEQ {} {} {} {}",
            name(kind),
            initial,
            params.min,
            params.max
        );
        let mut e = Estimate::new(&params, start, rng.next());
        if let Some((_, j)) = jitter_of(&e) {
            println!("J 0x{:016x}", j.to_bits());
        }
        // A service: a base RTT that drifts, a queueing delay that grows with what is in
        // flight past a capacity that changes, drops past a timeout or at random.
        let mut base_us = 1_000 + rng.below(50_000) as i64;
        let mut capacity = 1 + rng.below(400) as i64;
        for _ in 0..samples {
            if rng.below(200) == 0 {
                capacity = 1 + rng.below(400) as i64;
            }
            if rng.below(50) == 0 {
                base_us = (base_us + rng.below(2_001) as i64 - 1_000).max(1);
            }
            let limit = e.limit() as i64;
            let inflight = 1 + rng.below((limit * 3 / 2 + 2) as u64) as i64;
            let queue_us = (inflight - capacity).max(0) * base_us / capacity;
            let noise_us = rng.below(base_us as u64 / 4 + 1) as i64;
            let mut rtt_ns = (base_us + queue_us + noise_us) * 1000 + rng.below(1000) as i64;
            if rng.below(500) == 0 {
                rtt_ns = 5_000_000_000 + rng.below(3) as i64 - 1; // around AIMD's timeout
            }
            let dropped = rng.below(40) == 0 || queue_us > 20 * base_us;
            let sample = Sample {
                rtt_ns,
                inflight: inflight as i32,
                dropped,
            };
            let before = jitter_of(&e);
            e.update(&params, sample);
            if let (Some((seed, _)), Some((after_seed, j))) = (before, jitter_of(&e)) {
                if seed != after_seed {
                    println!("J 0x{:016x}", j.to_bits());
                }
            }
            let (estimate, extra) = match e {
                Estimate::Aimd { limit } => (f64::from(limit), String::new()),
                Estimate::Vegas(v) => (v.estimated, format!(" {}", v.rtt_noload_ns)),
                Estimate::Gradient2(g) => (g.estimated, format!(" {:016x}", g.long_rtt.to_bits())),
            };
            println!(
                "S {} {} {} {} {:016x}{}",
                rtt_ns,
                inflight,
                u8::from(dropped),
                e.limit(),
                estimate.to_bits(),
                extra
            );
        }
    }
}
