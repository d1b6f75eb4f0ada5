//! Local budgets (`local_budget:` on a rule): a hot rule's units taken from the module a batch
//! at a time (`ATMOST k - held`), spent here without a round trip each, and given back with
//! `RL.REFUND` when still unspent `hold / 2` after the refill left (and at shutdown).
//!
//! The packages' rule, and so their promise (docs/clients.md, "Local budgets", checked on the
//! pure algorithms by algorithms/src/budget_promise.rs): all the service's instances together
//! never admit more than the rule would over any interval lengthened by `hold`, and each holds
//! at most `k` units of a key unspent (which the others cannot have meanwhile). A fixed window's
//! units whose window ends within the whole `hold` of their refill are spent until it ends and
//! dropped there instead (a refund then would count for the next window). A refill that grants
//! nothing is remembered until its retry time: the key's requests are refused meanwhile without
//! a round trip.
//!
//! Pure: times are the caller's clock in µs. The server sends the refills and the refunds, and
//! keeps one refill per key in flight: a request that finds the budget empty while one is in
//! flight waits for it ([`Take::Wait`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use crate::decide::Decision;
use crate::plan::Rule;
use crate::rules::Algorithm;

/// Units taken together, spendable until `deadline` (exclusive); `lapses`: the deadline is a
/// fixed window's end, where they are dropped rather than given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Batch {
    deadline: u64,
    units: u64,
    lapses: bool,
}

/// What one descriptor took from a budget, to put back when its request is refused after all.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    key: String,
    batches: Vec<Batch>,
}

/// One key's budget.
struct Budget {
    rule: Rule,
    /// Oldest deadline first.
    batches: VecDeque<Batch>,
    held: u64,
    /// The last refill's reply (its `granted` aside) and when it came.
    last: Option<(Decision, u64)>,
    /// A refill that granted nothing: its reply, when it came, and until when it stands.
    denial: Option<(Decision, u64, u64)>,
    refilling: bool,
}

/// What a descriptor of a budgeted rule gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// Admitted from the budget.
    Spent(Decision, Taken),
    /// Refused by a refill that granted nothing, remembered.
    Denied(Decision),
    /// This request fills the budget: the rule's command with `ATMOST units`.
    Refill(u64),
    /// Another request's refill is in flight: ask again when it is back.
    Wait,
}

/// What the budgets did, for the service's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests' descriptors admitted from a budget without a round trip of their own (the
    /// server counts them: a take may be undone).
    pub local_admitted: u64,
    /// Refills answered.
    pub refills: u64,
    /// Fixed windows' units dropped unspent at their window's end.
    pub expired: u64,
    /// Units held unspent now, every key together.
    pub held: u64,
}

/// Every key's budget.
#[derive(Default)]
pub struct Budgets {
    table: HashMap<String, Budget>,
    /// (time, key): when a key's budget has something to do (a batch's deadline, a denial's
    /// end, a failed refill's leftovers), oldest first. Entries may be stale.
    heap: BinaryHeap<Reverse<(u64, String)>>,
    /// Units due to be given back, per key.
    due: HashMap<String, u64>,
    pub stats: Stats,
}

/// When a refill's units fall due, µs, and whether they lapse there (else they are given
/// back): `sent + hold / 2`, or, for a fixed window ending within the whole hold
/// (`reset_after_ms` after `sent`), the window's end, where they lapse. `sent` and `hold` in
/// µs. The packages' rule, held to the algorithms crate's model by
/// `clients/lua/conformance/budget.json` (`tests::the_rule_is_the_crates`).
fn falls_due(fixed_window: bool, sent: u64, hold: u64, reset_after_ms: u64) -> (u64, bool) {
    let window_end = sent.saturating_add(reset_after_ms.saturating_mul(1000));
    if fixed_window && window_end <= sent.saturating_add(hold) {
        (window_end, true)
    } else {
        (sent.saturating_add(hold / 2), false)
    }
}

fn ceil_ms(us: u64) -> i64 {
    i64::try_from(us.div_ceil(1000)).unwrap_or(i64::MAX)
}

fn elapsed_ms(now: u64, at: u64) -> i64 {
    i64::try_from(now.saturating_sub(at) / 1000).unwrap_or(i64::MAX)
}

impl Budgets {
    pub fn new() -> Budgets {
        Budgets::default()
    }

    /// A request's descriptor of `hits` units (1 to the budget's `k`) under `rule` (which has a
    /// `local_budget`) on `key`.
    pub fn take(&mut self, key: &str, rule: &Rule, hits: u64, now: u64) -> Take {
        let k = rule.local_budget.map_or(0, |b| u64::from(b.units));
        self.fit(key, rule, now);
        let Some(b) = self.table.get_mut(key) else {
            // `fit` made it: never here. A refill without a budget gives its units back.
            return Take::Refill(k.max(1));
        };
        expire(key, b, now, false, &mut self.due, &mut self.stats);
        if let Some((d, at, until)) = b.denial {
            if now < until {
                let retry = ceil_ms(until - now);
                return Take::Denied(Decision {
                    allowed: false,
                    remaining: 0,
                    retry_after_ms: retry,
                    reset_after_ms: retry.max(d.reset_after_ms.saturating_sub(elapsed_ms(now, at))),
                    ..d
                });
            }
            b.denial = None;
        }
        if let Some(last) = b.last.filter(|_| b.held >= hits) {
            let taken = spend(key, b, hits, &mut self.stats);
            return Take::Spent(local_decision(b.held, last, now), taken);
        }
        if b.refilling {
            return Take::Wait;
        }
        b.refilling = true;
        Take::Refill(k.saturating_sub(b.held).max(1))
    }

    /// The budget of `key` under `rule`: made when missing; emptied (its units due back) and
    /// made anew when the rules changed its rule.
    fn fit(&mut self, key: &str, rule: &Rule, now: u64) {
        match self.table.get_mut(key) {
            Some(b) if b.rule == *rule => {}
            Some(b) => {
                expire(key, b, now, true, &mut self.due, &mut self.stats);
                b.rule = rule.clone();
                b.last = None;
                b.denial = None;
            }
            None => {
                self.table.insert(
                    key.to_string(),
                    Budget {
                        rule: rule.clone(),
                        batches: VecDeque::new(),
                        held: 0,
                        last: None,
                        denial: None,
                        refilling: false,
                    },
                );
            }
        }
    }

    /// A refill claimed by [`Take::Refill`] and not sent after all (the request waits for
    /// another key's refill first), or that failed.
    pub fn cancel(&mut self, key: &str, now: u64) {
        self.refilled(key, None, 0, now);
    }

    /// A refill's reply (`granted` the units it took; its `sent` the clock read before it
    /// left, so that its units' deadline is never late): they join the budget, spendable until
    /// `sent + hold / 2` and given back then, or, a fixed window's ending within the whole
    /// hold, until its end, where they lapse. A reply that grants nothing is remembered until
    /// its retry time. None: the refill failed.
    pub fn refilled(&mut self, key: &str, reply: Option<(Decision, u64)>, sent: u64, now: u64) {
        let Some(b) = self.table.get_mut(key) else {
            // Gone meanwhile (the rules changed twice): what it took is given back.
            if let Some((_, granted @ 1..)) = reply {
                *self.due.entry(key.to_string()).or_default() += granted;
            }
            return;
        };
        b.refilling = false;
        let Some((reply, granted)) = reply else {
            // Failed: nothing to add; the heap entry lets an idle budget be dropped.
            self.heap.push(Reverse((now, key.to_string())));
            return;
        };
        self.stats.refills += 1;
        b.last = Some((reply, now));
        if granted > 0 {
            let hold = b
                .rule
                .local_budget
                .map_or(0, |l| l.hold_ms.saturating_mul(1000));
            let reset = u64::try_from(reply.reset_after_ms).unwrap_or(0);
            let windowed = b.rule.algorithm == Algorithm::FixedWindow;
            let (deadline, lapses) = falls_due(windowed, sent, hold, reset);
            let batch = Batch {
                deadline,
                units: granted,
                lapses,
            };
            insert(b, batch);
            b.held += granted;
            self.stats.held += granted;
            b.denial = None;
            self.heap.push(Reverse((batch.deadline, key.to_string())));
        } else if !reply.allowed {
            if let Ok(retry) = u64::try_from(reply.retry_after_ms) {
                let until = sent.saturating_add(retry.saturating_mul(1000));
                b.denial = Some((reply, now, until));
                self.heap.push(Reverse((until, key.to_string())));
            }
        }
    }

    /// Units taken by a request refused after all, back in their budget (or due back when
    /// their deadline passed meanwhile, or dropped when it was their window's end).
    pub fn put_back(&mut self, taken: Taken, now: u64) {
        let b = self.table.get_mut(&taken.key);
        let mut due = 0;
        match b {
            Some(b) => {
                for batch in taken.batches {
                    if batch.deadline > now {
                        insert(b, batch);
                        b.held += batch.units;
                        self.stats.held += batch.units;
                    } else if batch.lapses {
                        self.stats.expired += batch.units;
                    } else {
                        due += batch.units;
                    }
                }
            }
            // Its budget was dropped meanwhile: the units are given back now (within their
            // deadline: a fixed window's too).
            None => {
                due = taken
                    .batches
                    .iter()
                    .filter(|b| b.deadline > now || !b.lapses)
                    .map(|b| b.units)
                    .sum();
            }
        }
        if due > 0 {
            *self.due.entry(taken.key).or_default() += due;
        }
    }

    /// When the next batch falls due, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// The refunds due now (`everything`: every unit held, at shutdown), one `(key, units)`
    /// per key; idle budgets are dropped.
    pub fn collect(&mut self, now: u64, everything: bool) -> Vec<(String, u64)> {
        if everything {
            self.heap.clear();
            for (key, b) in &mut self.table {
                expire(key, b, now, true, &mut self.due, &mut self.stats);
            }
            self.table.retain(|_, b| b.refilling);
        }
        while let Some(Reverse((t, _))) = self.heap.peek() {
            if *t > now {
                break;
            }
            let Some(Reverse((_, key))) = self.heap.pop() else {
                break;
            };
            if let Some(b) = self.table.get_mut(&key) {
                expire(&key, b, now, false, &mut self.due, &mut self.stats);
                let denied = b.denial.is_some_and(|(_, _, until)| until > now);
                if b.held == 0 && !b.refilling && !denied {
                    self.table.remove(&key);
                }
            }
        }
        self.due.drain().filter(|(_, units)| *units > 0).collect()
    }

    /// Keys with a budget now.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

/// The decision of a descriptor served from a budget that holds `held` units after it: what
/// remains is those and what the module had left at the last refill (`last`, answered at
/// `at`); the reset counts down from that reply's.
fn local_decision(held: u64, (last, at): (Decision, u64), now: u64) -> Decision {
    Decision {
        allowed: true,
        limit: last.limit,
        remaining: held.saturating_add(last.remaining),
        retry_after_ms: 0,
        reset_after_ms: last
            .reset_after_ms
            .saturating_sub(elapsed_ms(now, at))
            .max(0),
    }
}

/// `hits` units from the oldest batches (the budget holds them).
fn spend(key: &str, b: &mut Budget, hits: u64, stats: &mut Stats) -> Taken {
    let mut taken = Taken {
        key: key.to_string(),
        batches: Vec::new(),
    };
    let mut left = hits;
    while left > 0 {
        let Some(batch) = b.batches.front_mut() else {
            break;
        };
        let units = left.min(batch.units);
        taken.batches.push(Batch { units, ..*batch });
        batch.units -= units;
        left -= units;
        if batch.units == 0 {
            b.batches.pop_front();
        }
    }
    b.held -= hits - left;
    stats.held -= hits - left;
    taken
}

/// A batch in deadline order, merged with one of the same deadline.
fn insert(b: &mut Budget, batch: Batch) {
    let at = b.batches.partition_point(|x| x.deadline < batch.deadline);
    match b.batches.get_mut(at) {
        Some(x) if x.deadline == batch.deadline && x.lapses == batch.lapses => {
            x.units += batch.units
        }
        _ => b.batches.insert(at, batch),
    }
}

/// The batches past their deadline (`everything`: all) leave the budget: due back, or dropped
/// when their deadline was their window's end and it has passed.
fn expire(
    key: &str,
    b: &mut Budget,
    now: u64,
    everything: bool,
    due: &mut HashMap<String, u64>,
    stats: &mut Stats,
) {
    while let Some(batch) = b.batches.front().copied() {
        if !everything && batch.deadline > now {
            break;
        }
        b.batches.pop_front();
        b.held -= batch.units;
        stats.held -= batch.units;
        if batch.lapses && batch.deadline <= now {
            stats.expired += batch.units;
        } else {
            *due.entry(key.to_string()).or_default() += batch.units;
        }
    }
}

#[cfg(test)]
mod tests;
