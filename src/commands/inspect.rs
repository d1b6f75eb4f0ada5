//! RL.INSPECT: read a key's algorithm, parameters and state without changing them.

use super::{command, Command, When, ONE_KEY, READ_FAST};
use crate::args::syntax::{name, KeyUse, KEY};
use crate::dispatch::{read_clock, Call};
use crate::error::Error;
use crate::response::{int, Described, Inspection, Reply, Response};
use crate::storage::{Key, Value};
use algorithms::adaptive::{Estimate, Kind};
use algorithms::Snapshot;

pub static RL_INSPECT: Command = command! {
    name: name!("rl.inspect"),
    flags: c"readonly fast",
    acl: READ_FAST,
    keys: ONE_KEY,
    when: When::Always,
    replayable: false,
    summary: c"Show a limiter key's algorithm, parameters and state, changing nothing",
    complexity: c"O(1); O(N) for a sliding log holding N entries; O(log N) for a concurrency key holding N leases",
    key: KeyUse::Read,
    args: &[KEY],
    handler: rl_inspect,
};

/// `RL.INSPECT key`
///
/// Reply: nil for a missing key; else a map (a flat name, value array for RESP2 clients):
/// `algorithm`, the parameters, the stored state, and `remaining` and `reset_after_ms` as of
/// the module's clock now, and `blocked_until_us` while a `BLOCK` penalty is set. An RL.LIMIT
/// key adds `rules`, the same for each rule of the policy it was last written with.
pub fn rl_inspect(call: &Call) -> Result<Response, Error> {
    RL_INSPECT.syntax.args_bounded(call.args)?;
    let mut key = Key::open(call.ctx, call.key()?, false);
    let reply = match key.snapshot()? {
        None => Reply::Nil,
        Some(entry) => {
            let now_us = read_clock().now_us;
            let snapshot = entry.value.snapshot(now_us);
            let mut fields = named_fields(&snapshot);
            if entry.blocked_until_us > 0 {
                fields.push(("blocked_until_us", int(entry.blocked_until_us)));
            }
            let rules: Vec<Described> = match &entry.value {
                Value::RuleSet(s) => s
                    .params
                    .iter()
                    .zip(&s.state)
                    .map(|(rule, state)| {
                        let snapshot = rule.snapshot(state, now_us);
                        (
                            rule.kind(),
                            snapshot.as_ref().map_or_else(Vec::new, named_fields),
                        )
                    })
                    .collect(),
                _ => Vec::new(),
            };
            Reply::Inspect(Inspection {
                algorithm: entry.value.kind(),
                adaptive: adaptive_name(&snapshot),
                fields,
                rules,
            })
        }
    };
    Ok(Response::reply(reply))
}

/// The name of an adaptive concurrency key's algorithm, as RL.INSPECT's `adaptive` field.
fn adaptive_name(snapshot: &Snapshot) -> Option<&'static str> {
    match snapshot {
        Snapshot::Concurrency(s) => s.adaptive.map(|(bounds, _)| match bounds.kind {
            Kind::Aimd => "aimd",
            Kind::Vegas => "vegas",
            Kind::Gradient2 => "gradient2",
        }),
        _ => None,
    }
}

/// An adaptive limit's estimates, in whole units: Vegas' no-load RTT and the sample count
/// of its next probe; Gradient2's short (last) and long-term RTT; and for both the estimated
/// limit in thousandths (the limit is its whole part).
fn estimates(estimate: &Estimate) -> Vec<(&'static str, i64)> {
    let milli = |x: f64| (x * 1000.0) as i64;
    match estimate {
        Estimate::Aimd { .. } => Vec::new(),
        Estimate::Vegas(v) => vec![
            ("estimated_limit_milli", milli(v.estimated)),
            ("rtt_noload_us", v.rtt_noload_ns / 1000),
            ("probe_count", i64::from(v.probe_count)),
            ("probe_at", v.probe_at()),
        ],
        Estimate::Gradient2(g) => vec![
            ("estimated_limit_milli", milli(g.estimated)),
            ("short_rtt_us", g.last_rtt_ns / 1000),
            ("long_rtt_us", (g.long_rtt / 1000.0) as i64),
        ],
    }
}

/// RL.INSPECT's fields after the algorithm name: the parameters, the stored state, then
/// `remaining` and `reset_after_ms` as of the snapshot's instant.
fn named_fields(snapshot: &Snapshot) -> Vec<(&'static str, i64)> {
    let mut fields = match snapshot {
        Snapshot::Gcra(s) => vec![
            ("limit", int(s.params.burst)),
            ("burst", int(s.params.burst)),
            ("rate", int(s.params.rate)),
            ("period_ms", int(s.params.period_ms)),
            ("tat_us", int(s.tat_us)),
        ],
        Snapshot::TokenBucket(s) => vec![
            ("limit", int(s.params.capacity)),
            ("capacity", int(s.params.capacity)),
            ("refill_amount", int(s.params.refill_amount)),
            ("refill_period_ms", int(s.params.refill_period_ms)),
            ("interval", i64::from(s.params.interval)),
            ("tokens", int(s.tokens)),
            (
                if s.params.interval {
                    "last_refill_us"
                } else {
                    "updated_us"
                },
                int(s.updated_us),
            ),
        ],
        Snapshot::LeakyBucket(s) => vec![
            ("limit", int(s.params.capacity)),
            ("capacity", int(s.params.capacity)),
            ("leak_amount", int(s.params.leak_amount)),
            ("leak_period_ms", int(s.params.leak_period_ms)),
            ("empty_at_us", int(s.empty_at_us)),
            ("queued", int(s.queued)),
        ],
        Snapshot::FixedWindow(s) => vec![
            ("limit", int(s.params.limit)),
            ("window_ms", int(s.params.window_ms)),
            ("window_start_us", int(s.window_start_us)),
            ("count", int(s.count)),
        ],
        Snapshot::SlidingWindow(s) => vec![
            ("limit", int(s.params.limit)),
            ("window_ms", int(s.params.window_ms)),
            ("window_start_us", int(s.window_start_us)),
            ("current", int(s.current)),
            ("previous", int(s.previous)),
        ],
        Snapshot::SlidingLog(s) => vec![
            ("limit", int(s.limit)),
            ("window_ms", int(s.params.window_ms)),
            ("entries", int(s.entries)),
            ("active", int(s.active)),
            ("oldest_us", int(s.oldest_us)),
            ("newest_us", int(s.newest_us)),
        ],
        Snapshot::Concurrency(s) => {
            let mut fields = vec![
                ("limit", int(s.now.limit)),
                ("lease_ms", int(s.params.lease_ms)),
                ("held", int(s.held)),
                ("issued", int(s.issued)),
            ];
            if let Some((bounds, estimate)) = s.adaptive {
                fields.extend([
                    ("start", int(s.params.limit)),
                    ("min", i64::from(bounds.min)),
                    ("max", i64::from(bounds.max)),
                ]);
                fields.extend(estimates(&estimate));
            }
            fields
        }
        Snapshot::Warmup(s) => vec![
            ("limit", 1),
            ("rate", int(s.params.rate)),
            ("period_ms", int(s.params.period_ms)),
            ("warmup_ms", int(s.params.warmup_ms)),
            ("coldfactor", int(s.params.cold_factor)),
            ("stored_micropermits", int(s.stored_micropermits)),
            ("max_micropermits", int(s.max_micropermits)),
            ("next_free_us", int(s.next_free_us)),
        ],
        Snapshot::RuleSet(s) => vec![("binding_rule", int(s.binding as u64))],
    };
    let now = snapshot.now();
    fields.push(("remaining", int(now.remaining)));
    fields.push(("reset_after_ms", int(now.reset_after.ceil_ms())));
    fields
}

#[cfg(test)]
mod tests {
    use super::named_fields;
    use algorithms::{
        fixed_window::{self, FixedWindow},
        gcra::{self, Gcra},
        leaky_bucket::{self, LeakyBucket},
        sliding_log::{self, SlidingLog},
        sliding_window::{self, SlidingWindow},
        token_bucket::{self, TokenBucket},
        warmup::{self, Warmup},
        Algorithm,
    };

    const T0: u64 = 1_700_000_000_000_000; // a clock reading in µs
    const T2: u64 = 1_699_927_200_000_000; // a whole hour
    const S: u64 = 1_000_000; // a second in µs

    /// A key's state after requests `(µs, cost)` that write when admitted.
    fn key_after<A: Algorithm>(p: &A::Params, requests: &[(u64, u64)]) -> A::State {
        let mut state: Option<A::State> = None;
        for &(at, cost) in requests {
            match state.as_mut() {
                Some(s) => {
                    A::check(p, Some((p, s)), at, cost, true);
                }
                None => state = A::check(p, None, at, cost, true).1,
            }
        }
        state.expect("the first request is admitted")
    }

    /// RL.INSPECT's fields for a key of `A` after `requests`, at `now_us`.
    fn fields<A: Algorithm>(
        p: &A::Params,
        requests: &[(u64, u64)],
        now_us: u64,
    ) -> Vec<(&'static str, i64)> {
        named_fields(&A::snapshot(p, &key_after::<A>(p, requests), now_us))
    }

    #[test]
    fn gcra_fields() {
        let p = gcra::Params {
            burst: 5,
            rate: 1,
            period_ms: 1000,
        };
        assert_eq!(
            fields::<Gcra>(&p, &[(T0, 2)], T0 + 500_000),
            vec![
                ("limit", 5),
                ("burst", 5),
                ("rate", 1),
                ("period_ms", 1000),
                ("tat_us", (T0 + 2_000_000) as i64),
                ("remaining", 3),
                ("reset_after_ms", 1500),
            ]
        );
    }

    #[test]
    fn warmup_fields() {
        let p = warmup::Params {
            rate: 10,
            period_ms: 1000,
            warmup_ms: 10_000,
            cold_factor: 3,
        };
        // One request from cold: 298 ms owed, 99 of 100 permits stored; 100 ms later the
        // key is still owed, so nothing has cooled.
        assert_eq!(
            fields::<Warmup>(&p, &[(T0, 1)], T0 + 100_000),
            vec![
                ("limit", 1),
                ("rate", 10),
                ("period_ms", 1000),
                ("warmup_ms", 10_000),
                ("coldfactor", 3),
                ("stored_micropermits", 99_000_000),
                ("max_micropermits", 100_000_000),
                ("next_free_us", (T0 + 298_000) as i64),
                ("remaining", 0),
                ("reset_after_ms", 298),
            ]
        );
    }

    #[test]
    fn token_bucket_fields_name_the_instant_by_the_refill() {
        let mut p = token_bucket::Params {
            capacity: 4,
            refill_amount: 4,
            refill_period_ms: 60_000,
            interval: false,
        };
        assert_eq!(
            fields::<TokenBucket>(&p, &[(T0, 3)], T0 + 20 * S),
            vec![
                ("limit", 4),
                ("capacity", 4),
                ("refill_amount", 4),
                ("refill_period_ms", 60_000),
                ("interval", 0),
                ("tokens", 1),
                ("updated_us", T0 as i64),
                ("remaining", 2),
                ("reset_after_ms", 25_000),
            ]
        );
        p = token_bucket::Params {
            capacity: 3,
            refill_amount: 3,
            refill_period_ms: 60_000,
            interval: true,
        };
        assert_eq!(
            fields::<TokenBucket>(&p, &[(T0, 1), (T0 + 70 * S, 3)], T0 + 100 * S),
            vec![
                ("limit", 3),
                ("capacity", 3),
                ("refill_amount", 3),
                ("refill_period_ms", 60_000),
                ("interval", 1),
                ("tokens", 0),
                ("last_refill_us", (T0 + 60 * S) as i64),
                ("remaining", 0),
                ("reset_after_ms", 20_000),
            ]
        );
    }

    #[test]
    fn leaky_bucket_fields() {
        let p = leaky_bucket::Params {
            capacity: 3,
            leak_amount: 2,
            leak_period_ms: 1000,
        };
        assert_eq!(
            fields::<LeakyBucket>(&p, &[(T0, 2)], T0 + 250_000),
            vec![
                ("limit", 3),
                ("capacity", 3),
                ("leak_amount", 2),
                ("leak_period_ms", 1000),
                ("empty_at_us", (T0 + 1_000_000) as i64),
                ("queued", 2),
                ("remaining", 1),
                ("reset_after_ms", 750),
            ]
        );
    }

    #[test]
    fn fixed_window_fields() {
        let p = fixed_window::Params {
            limit: 5,
            window_ms: 60_000,
        };
        assert_eq!(
            fields::<FixedWindow>(&p, &[(T2 + 10 * S, 2)], T2 + 20 * S),
            vec![
                ("limit", 5),
                ("window_ms", 60_000),
                ("window_start_us", T2 as i64),
                ("count", 2),
                ("remaining", 3),
                ("reset_after_ms", 40_000),
            ]
        );
        // After the window: the same state reads as fresh.
        let after = fields::<FixedWindow>(&p, &[(T2 + 10 * S, 2)], T2 + 60 * S);
        assert_eq!(after[4..], [("remaining", 5), ("reset_after_ms", 0)]);
    }

    #[test]
    fn sliding_window_fields() {
        let p = sliding_window::Params {
            limit: 7,
            window_ms: 60_000,
        };
        assert_eq!(
            fields::<SlidingWindow>(&p, &[(T2 + 10 * S, 5), (T2 + 65 * S, 3)], T2 + 78 * S),
            vec![
                ("limit", 7),
                ("window_ms", 60_000),
                ("window_start_us", (T2 + 60 * S) as i64),
                ("current", 3),
                ("previous", 5),
                ("remaining", 1),
                ("reset_after_ms", 82_001),
            ]
        );
    }

    #[test]
    fn sliding_log_fields() {
        const T0: u64 = 1_700_002_800_000_000;
        let p = sliding_log::Params {
            limit: 5,
            window_ms: 60_000,
        };
        let requests = [(T0, 2), (T0 + 10 * S, 1), (T0 + 20 * S, 1)];
        assert_eq!(
            fields::<SlidingLog>(&p, &requests, T0 + 65 * S),
            vec![
                ("limit", 5),
                ("window_ms", 60_000),
                ("entries", 3),
                ("active", 2),
                ("oldest_us", T0 as i64),
                ("newest_us", (T0 + 20 * S) as i64),
                ("remaining", 3),
                ("reset_after_ms", 15_000),
            ]
        );
    }
}
