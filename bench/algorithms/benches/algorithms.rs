//! Nanoseconds per decision of the pure algorithm cores, without Redis (the algorithms crate
//! does not link it). Each benchmark runs one key in steady state: a clock that moves on by a
//! fixed step per request, cost 1, writing when admitted, as a real request does.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use ratelimit_algorithms::{
    fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket, warmup, Algorithm,
};

const T0: u64 = 1_700_000_000_000_000;

/// Runs `A` on one key: the first request makes the state, then each iteration decides one
/// request `step_us` after the previous one.
fn steady<A: Algorithm>(c: &mut Criterion, name: &str, params: A::Params, step_us: u64) {
    let (_, fresh) = A::check(&params, None, T0, 1, true);
    let mut state = fresh.expect("the first request is admitted");
    let mut now = T0;
    c.bench_function(name, |b| {
        b.iter(|| {
            now += step_us;
            let (decision, _) = A::check(
                black_box(&params),
                Some((&params, &mut state)),
                now,
                1,
                true,
            );
            black_box(decision)
        })
    });
}

fn decisions(c: &mut Criterion) {
    // 100 per second with a burst of 100, hit every 5 ms: about half the requests admitted.
    steady::<gcra::Gcra>(
        c,
        "gcra",
        gcra::Params {
            burst: 100,
            rate: 100,
            period_ms: 1000,
        },
        5_000,
    );
    steady::<token_bucket::TokenBucket>(
        c,
        "tokenbucket",
        token_bucket::Params {
            capacity: 100,
            refill_amount: 100,
            refill_period_ms: 1000,
            interval: false,
        },
        5_000,
    );
    steady::<token_bucket::TokenBucket>(
        c,
        "tokenbucket interval",
        token_bucket::Params {
            capacity: 100,
            refill_amount: 100,
            refill_period_ms: 1000,
            interval: true,
        },
        5_000,
    );
    steady::<leaky_bucket::LeakyBucket>(
        c,
        "leakybucket",
        leaky_bucket::Params {
            capacity: 100,
            leak_amount: 100,
            leak_period_ms: 1000,
        },
        5_000,
    );
    steady::<fixed_window::FixedWindow>(
        c,
        "fixedwindow",
        fixed_window::Params {
            limit: 100,
            window_ms: 1000,
        },
        5_000,
    );
    steady::<sliding_window::SlidingWindow>(
        c,
        "slidingwindow",
        sliding_window::Params {
            limit: 100,
            window_ms: 1000,
        },
        5_000,
    );
    // Warm-up, 100 per second over 10 s, hit every 5 ms: about half admitted, the key staying
    // warm (stored permits near zero, the products fit in u128).
    steady::<warmup::Warmup>(
        c,
        "warmup",
        warmup::Params {
            rate: 100,
            period_ms: 1000,
            warmup_ms: 10_000,
            cold_factor: 3,
        },
        5_000,
    );
    // Hit every 40 ms: the key cools between requests and spends permits above the threshold,
    // the area computed every time.
    steady::<warmup::Warmup>(
        c,
        "warmup cold",
        warmup::Params {
            rate: 100,
            period_ms: 1000,
            warmup_ms: 10_000,
            cold_factor: 3,
        },
        40_000,
    );
    // The largest parameters, each request from cold (the cold interval is 3.15 ms): the
    // area's product taken 256 bits wide.
    steady::<warmup::Warmup>(
        c,
        "warmup wide",
        warmup::Params {
            rate: 1_000_000_000_000,
            period_ms: 3650 * 86_400_000,
            warmup_ms: 3650 * 86_400_000,
            cold_factor: 10,
        },
        4_000,
    );
    // A full log that slides: each admitted request drops the oldest entry and appends.
    for limit in [100u64, 10_000, 1_000_000] {
        let window_ms = 1000;
        let step_us = window_ms * 1000 / limit / 2;
        steady::<sliding_log::SlidingLog>(
            c,
            &format!("slidinglog limit {limit}"),
            sliding_log::Params { limit, window_ms },
            step_us.max(1),
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = decisions
}
criterion_main!(benches);
