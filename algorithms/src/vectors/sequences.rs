//! The sequences: what the module replies to calls with its options, RL.REFUND, policies and
//! leases, decided by this crate, for `clients/lua/conformance/sequences.json`.
//!
//! replies.json holds what the algorithms decide. The module adds a command layer around
//! them: `COST n | ATMOST max`, `DRYRUN`, `BLOCK duration` and `SHADOW` (`run_with`,
//! `update_at_most` in src/commands/admission.rs; `Key::decide` in src/storage/key.rs, where a
//! BLOCK lives on the key), RL.REFUND (src/commands/refund.rs, `Key::refund`), RL.LIMIT's
//! binding rule (src/commands/limit.rs) and the leases' replies (src/commands/concurrency.rs).
//! What that layer decides is the crate's ([`request`]: the options, a BLOCK, the ATMOST
//! grant, SHADOW; [`Algorithm::largest_cost`], [`Algorithm::refund`], [`Algorithm::view_now`],
//! [`rule_set::step_shadow`], [`rule_set::largest_cost_enforced`], [`Lease::acquire`],
//! [`Lease::release`]); what is left to the module is keeping the key, which [`update`],
//! [`admit`], [`refund`] and the lease calls below do as its storage does, and the
//! replies are rendered as src/response/render.rs renders them (RESP2): the five fields, the
//! command's own sixth (`delay_ms`, `rule`, `token`), `granted` under ATMOST, `shadow_denied`
//! last under SHADOW. The Lua scripts are held to the module's replies field by field by the
//! differential tests (clients/lua/README.md, "The proof"); these hold them to the crate
//! without a module.
//!
//! Each case is a sequence of calls on one key (a policy: one key per rule, as policy.lua
//! keeps them): `[script, now_us, words, reply]`, the words those after the key(s) as the
//! script takes them (README.md, "Calling convention"), the reply JSON (an array, an integer;
//! a token or a nil as a string or null).

use super::{spell, Entry, Kind, Rng, DURATIONS, ENTRIES};
use crate::concurrency::{self, Concurrency, Report};
use crate::ranges::{MAX_COUNT, MAX_DURATION_MS};
use crate::request::{self, Aside, Effect, Options as Opts};
use crate::rule_set::{self, Rules, Verdict};
use crate::{penalty, Algorithm, Decision, Lease, Span};

/// Replies and TTLs must be below 2^53 ms on the scripts (README.md, "Ranges": beyond it a
/// script refuses the call, where the module answers): a case that reaches it is drawn anew.
const EXACT_MS: u64 = 1 << 53;

/// The clocks stay below the scripts' limit, 2^53 − 2^50 µs (README.md, "Ranges"), with a
/// margin for a lease or a block of ten years.
const NOW_CAP: u64 = (1 << 53) - (1 << 50) - 2 * MAX_DURATION_MS * 1000;

/// The calls of one case, rendered, and whether every time in them is in the scripts' range.
struct Session {
    calls: Vec<String>,
    fits: bool,
}

impl Session {
    fn new() -> Session {
        Session {
            calls: Vec::new(),
            fits: true,
        }
    }

    /// A span as the reply shows it (whole ms, rounded up), noting one beyond the scripts' range.
    fn ms(&mut self, span: Span) -> i64 {
        let ms = span.ceil_ms();
        if ms >= EXACT_MS {
            self.fits = false;
        }
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    fn push(&mut self, script: &str, now_us: u64, words: &[String], reply: String) {
        let words: Vec<String> = words.iter().map(|w| quoted(w)).collect();
        self.calls.push(format!(
            "[\"{script}\", {now_us}, [{}], {reply}]",
            words.join(", ")
        ));
    }

    /// The case as a line of the file, `None` when it reached beyond the scripts' range.
    fn case(self, name: &str, keys: usize) -> Option<String> {
        self.fits.then(|| {
            format!(
                "{{\"name\": {}, \"keys\": {keys}, \"calls\": [{}]}}",
                quoted(name),
                self.calls.join(", ")
            )
        })
    }
}

fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The admission reply (render.rs's RESP2 array): `allowed` as answered (SHADOW included), the
/// four times and counts, then `extra`, `granted` and `shadow_denied` when there.
fn rendered(
    s: &mut Session,
    d: &Decision,
    extra: Option<String>,
    granted: Option<u64>,
    shadow_denied: Option<bool>,
) -> String {
    let retry = match d.retry_after {
        Some(span) => s.ms(span),
        None => -1,
    };
    let reset = s.ms(d.reset_after);
    let mut fields = vec![
        u8::from(d.allowed).to_string(),
        d.limit.to_string(),
        d.remaining.to_string(),
        retry.to_string(),
        reset.to_string(),
    ];
    fields.extend(extra);
    fields.extend(granted.map(|g| g.to_string()));
    fields.extend(shadow_denied.map(|b| u8::from(b).to_string()));
    format!("[{}]", fields.join(","))
}

/// A key as the module holds it: the parameters of its last write and its state, and the end
/// of a BLOCK (µs; over when not after now).
struct Key<P, S> {
    stored: Option<(P, S)>,
    blocked_until_us: u64,
}

impl<P, S> Key<P, S> {
    fn new() -> Self {
        Key {
            stored: None,
            blocked_until_us: 0,
        }
    }
}

/// What [`update`] decided.
struct Updated<T> {
    decision: Decision,
    aside: T,
    /// `ATMOST`: the units granted.
    granted: Option<u64>,
}

/// An admission on `key`: src/commands/admission.rs `run_with` and `update_at_most`, and
/// what src/storage/key.rs `Key::update` keeps of [`request::settle`]. `check` and `largest`
/// are the algorithm's (`Algorithm::check` and `largest_cost`, or RL.LIMIT's).
fn update<P: Clone, S, T: Aside>(
    key: &mut Key<P, S>,
    params: &P,
    now_us: u64,
    o: Opts,
    mut check: impl FnMut(&P, Option<(&P, &mut S)>, u64, u64, bool) -> (Decision, Option<S>, T),
    largest: impl Fn(&P, Option<(&P, &S)>, u64) -> u64,
) -> Updated<T> {
    let request = o.request(now_us);
    let mut grant = 0;
    let mut step = |stored: Option<(&P, &mut S)>, write: bool| {
        let cost = match o.atmost {
            None => o.cost,
            Some(atmost) => {
                let view = stored.as_ref().map(|(p, s)| (*p, &**s));
                let cost;
                (grant, cost) = request::grant(atmost, largest(params, view, now_us));
                cost
            }
        };
        check(params, stored, now_us, cost, write)
    };
    let Key {
        stored,
        blocked_until_us,
    } = key;
    let (decision, aside, effect) = match stored {
        None => {
            let (mut d, fresh, mut aside) = step(None, request::may_write(0, &request));
            let effect = request::settle(0, &request, &mut d, &mut aside);
            if let (Effect::Counted, Some(state)) = (effect, fresh) {
                *stored = Some((params.clone(), state));
            }
            (d, aside, effect)
        }
        Some((p, s)) => {
            let blocked = *blocked_until_us;
            let write = request::may_write(blocked, &request);
            let (mut d, _, mut aside) = step(Some((&*p, s)), write);
            let effect = request::settle(blocked, &request, &mut d, &mut aside);
            match effect {
                Effect::Counted => {
                    *p = params.clone();
                    *blocked_until_us = 0;
                }
                Effect::Blocks(until) => *blocked_until_us = until,
                Effect::Unchanged | Effect::Blocked(_) => {}
            }
            (d, aside, effect)
        }
    };
    if effect.writes() && decision.reset_after.is_zero() {
        // `admission::written`: a key fresh again goes.
        *stored = None;
        *blocked_until_us = 0;
    }
    Updated {
        decision,
        aside,
        // A blocked key refuses whatever the algorithm would grant.
        granted: o.atmost.map(|_| if decision.allowed { grant } else { 0 }),
    }
}

/// An admission command of `A` (src/commands/<algorithm>.rs, `Decided::reply`).
fn admit<A: Entry>(
    s: &mut Session,
    key: &mut Key<A::Params, A::State>,
    params: &A::Params,
    now_us: u64,
    o: Opts,
) -> String {
    let u = update(
        key,
        params,
        now_us,
        o,
        |p, stored, now, cost, write| {
            let (d, fresh) = A::check(p, stored, now, cost, write);
            (d, fresh, ())
        },
        A::largest_cost,
    );
    let mut d = u.decision;
    let delay = A::DELAY.then(|| match d.delay {
        Some(span) => s.ms(span).to_string(),
        None => "-1".to_string(),
    });
    let shadow_denied = request::shadowed(&mut d, o.shadow);
    rendered(s, &d, delay, u.granted, o.shadow.then_some(shadow_denied))
}

/// RL.REFUND (src/commands/refund.rs, `Key::refund`): the units given back.
fn refund<P, S: Clone>(
    s: &mut Session,
    key: &mut Key<P, S>,
    now_us: u64,
    units: u64,
    dryrun: bool,
    give: impl Fn(&P, &mut S, u64, u64) -> u64,
    view: impl Fn(&P, &S, u64) -> Decision,
) -> u64 {
    let blocked = key.blocked_until_us;
    let Some((p, state)) = key.stored.as_mut() else {
        return 0;
    };
    let write = !dryrun && units > 0;
    let mut copy;
    let state = if write {
        state
    } else {
        copy = state.clone();
        &mut copy
    };
    let given = give(p, state, now_us, units);
    let mut now = view(p, state, now_us);
    penalty::apply(&mut now, blocked, now_us);
    if write && given > 0 {
        // The key's new TTL (the script refuses one beyond its range), or the key goes.
        s.ms(now.reset_after);
        if now.reset_after.is_zero() {
            key.stored = None;
            key.blocked_until_us = 0;
        }
    }
    given
}

/// The next clock reading: the same µs, within a period, over several, below a ms, or a step
/// back; below [`NOW_CAP`].
fn tick(rng: &mut Rng, now_us: u64, period_ms: u64) -> u64 {
    let p = period_ms.saturating_mul(1000);
    let next = match rng.range(1, 100) {
        1..=30 => now_us,
        31..=72 => now_us + rng.range(1, p),
        73..=92 => now_us + rng.range(p, 3 * p),
        93..=97 => now_us + rng.range(1, 999),
        _ => now_us.saturating_sub(rng.range(1, p.min(10_000_000))),
    };
    if next > NOW_CAP {
        now_us + rng.range(0, (NOW_CAP - now_us) / 4)
    } else {
        next
    }
}

/// A first clock reading: some time on 2023-11-14/15.
fn start(rng: &mut Rng) -> u64 {
    1_700_000_000_000_000 + rng.range(0, 86_400_000_000)
}

/// A cost: none, one, two, up to the limit and past it; the largest (10^12) in wide cases.
fn cost(rng: &mut Rng, limit: u64, wide: bool) -> u64 {
    let cost = match rng.range(1, 10) {
        1 => 0,
        2..=5 => 1,
        6 => 2,
        7 if wide => rng.pick(&[limit, limit.saturating_sub(1), limit + 1, MAX_COUNT]),
        8 if wide => rng.range(1, limit),
        _ => rng.range(0, limit.saturating_add(2)),
    };
    cost.min(MAX_COUNT)
}

/// An admission's options and the words that say them (in any order and letter case; a cost of
/// one mostly said by nothing at all, a plain call, which a script's fast path takes).
fn options(rng: &mut Rng, limit: u64, wide: bool) -> (Opts, Vec<String>) {
    let mut o = Opts {
        cost: cost(rng, limit, wide),
        atmost: None,
        dryrun: rng.chance(15),
        block_ms: None,
        shadow: rng.chance(15),
    };
    if rng.chance(20) {
        o.atmost = Some(match rng.range(1, 4) {
            1 => 1,
            2 => rng.range(1, limit.saturating_add(2).min(MAX_COUNT)),
            3 => MAX_COUNT,
            _ => rng.range(1, 3),
        });
        o.cost = 1;
    }
    if rng.chance(25) {
        let ms = if wide && rng.chance(20) {
            rng.pick(&[MAX_DURATION_MS, 1])
        } else {
            rng.pick(&DURATIONS[..5])
        };
        o.block_ms = Some(ms);
    }
    let mut groups: Vec<Vec<String>> = Vec::new();
    if let Some(n) = o.atmost {
        groups.push(vec!["ATMOST".into(), n.to_string()]);
    } else if o.cost != 1 || rng.chance(20) {
        groups.push(vec!["COST".into(), o.cost.to_string()]);
    }
    if o.dryrun {
        groups.push(vec!["DRYRUN".into()]);
    }
    if let Some(ms) = o.block_ms {
        groups.push(vec!["BLOCK".into(), spell(rng, ms)]);
    }
    if o.shadow {
        groups.push(vec!["SHADOW".into()]);
    }
    for i in (1..groups.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        groups.swap(i, j);
    }
    let mut words: Vec<String> = groups.concat();
    if rng.chance(10) {
        for w in &mut words {
            *w = w.to_lowercase();
        }
    }
    (o, words)
}

/// Units to refund, and whether as a DRYRUN, with the words that say them.
fn refund_words(rng: &mut Rng, limit: u64) -> (u64, bool, Vec<String>) {
    let units = match rng.range(1, 6) {
        1 => 0,
        2 | 3 => 1,
        4 => MAX_COUNT,
        _ => rng.range(1, limit.saturating_add(1).min(MAX_COUNT)),
    };
    let dryrun = rng.chance(30);
    let mut words = vec![units.to_string()];
    if dryrun {
        words.push(rng.pick(&["DRYRUN", "dryrun"]).to_string());
    }
    (units, dryrun, words)
}

/// A case of `A`: 24 calls of its command with options, and refunds, on one key; parameters
/// at the ranges' edges when `wide`. `None` when a reply would be beyond the scripts' range.
pub fn admissions<A: Entry>(rng: &mut Rng, wide: bool) -> Option<String> {
    let (args, params, limit, period_ms) = if wide {
        A::draw_wide(rng)
    } else {
        A::draw(rng)
    };
    let mut key = Key::new();
    let mut s = Session::new();
    let mut now_us = start(rng);
    for _ in 0..24 {
        now_us = tick(rng, now_us, period_ms);
        if rng.chance(15) {
            let (units, dryrun, words) = refund_words(rng, limit);
            let given = refund(
                &mut s,
                &mut key,
                now_us,
                units,
                dryrun,
                A::refund,
                A::view_now,
            );
            s.push("refund", now_us, &words, given.to_string());
        } else {
            let (o, words) = options(rng, limit, wide);
            let reply = admit::<A>(&mut s, &mut key, &params, now_us, o);
            s.push(A::SCRIPT, now_us, &[args.clone(), words].concat(), reply);
        }
    }
    let name = format!(
        "{} {}{}",
        A::COMMAND,
        args.join(" "),
        if wide { " (wide)" } else { "" }
    );
    s.case(&name, 1)
}

/// A policy of 1 to 3 rules drawn from `ENTRIES` (some `SHADOW`, at least one not), written
/// as policy.lua takes it (README.md, "Policies"): 24 calls of RL.LIMIT with options, and
/// RL.REFUND, on one key per rule.
pub fn policy(rng: &mut Rng) -> Option<String> {
    let n = rng.range(1, 3) as usize;
    let mut words = Vec::new();
    let mut rules = Vec::new();
    let mut periods = Vec::new();
    let mut shadow = 0u32;
    let mut limit = 0;
    for i in 0..n {
        let entry: &Kind = &ENTRIES[rng.range(0, ENTRIES.len() as u64 - 1) as usize];
        let (args, rule, rule_limit, period) = (entry.rule)(rng);
        if n > 1 && i < n - 1 && rng.chance(25)
            || n > 1 && i == n - 1 && shadow == 0 && rng.chance(15)
        {
            shadow |= 1 << i;
            words.push("SHADOW".to_string());
        }
        // Rule names in any case, with RL. or without (RL.POLICY.SET's grammar).
        let name = entry.command.strip_prefix("RL.").unwrap_or(entry.command);
        words.push(match rng.range(1, 5) {
            1 => name.to_lowercase(),
            2 => entry.command.to_string(),
            _ => name.to_string(),
        });
        words.extend(args);
        rules.push(rule);
        periods.push(period);
        limit = limit.max(rule_limit);
    }
    if shadow.count_ones() as usize == n {
        return None;
    }
    let rules: Rules = rules.into();
    let mut key: Key<Rules, Vec<rule_set::RuleState>> = Key::new();
    let mut s = Session::new();
    let mut now_us = start(rng);
    for _ in 0..24 {
        let period = periods[rng.range(0, n as u64 - 1) as usize];
        now_us = tick(rng, now_us, period);
        if rng.chance(15) {
            let (units, dryrun, refund_words) = refund_words(rng, limit);
            let given = refund(
                &mut s,
                &mut key,
                now_us,
                units,
                dryrun,
                <rule_set::RuleSet as Algorithm>::refund,
                <rule_set::RuleSet as Algorithm>::view_now,
            );
            s.push("policyrefund", now_us, &refund_words, given.to_string());
            continue;
        }
        let (o, option_words) = options(rng, limit, false);
        let u = update(
            &mut key,
            &rules,
            now_us,
            o,
            |p: &Rules, stored, now, cost, write| {
                let stored = stored.map(|(old, states)| (&old[..], states));
                let (v, fresh) = rule_set::step_shadow(p, shadow, stored, now, cost, write);
                (v.decision, fresh, v)
            },
            |p, stored, now| rule_set::largest_cost_enforced(p, shadow, stored, now),
        );
        // src/commands/limit.rs: the reply is the binding rule's (a BLOCK answered for it too).
        let Verdict {
            binding: index,
            binding_decision: mut d,
            shadow_denied: shadow_rules,
            ..
        } = u.aside;
        s.ms(u.decision.reset_after); // the keys' TTL
        let shadow_rule_denied = d.allowed && shadow_rules != 0;
        let shadow_denied = request::shadowed(&mut d, o.shadow) || shadow_rule_denied;
        let reply = rendered(
            &mut s,
            &d,
            Some(index.to_string()),
            u.granted,
            o.shadow.then_some(shadow_denied),
        );
        s.push(
            "policy",
            now_us,
            &[words.clone(), option_words].concat(),
            reply,
        );
    }
    s.case(&format!("RL.LIMIT {}", words.join(" ")), n)
}

/// Leases: 24 acquisitions (generated tokens and `ID`s, renewals, `DRYRUN`, `SHADOW`, the
/// limit and the lease changed now and then) and releases (of held, ended and unknown
/// tokens, with `RTT` and `DROPPED`) on one key. `wide`: leases up to ten years, limits up to
/// the scripts' 100000 (README.md, "Ranges").
pub fn leases(rng: &mut Rng, wide: bool) -> Option<String> {
    let draw = |rng: &mut Rng| -> (u64, u64) {
        if wide {
            (
                rng.pick(&[1, 2, 100_000, 99_999]),
                rng.pick(&[1, 2, 999, MAX_DURATION_MS, 31_536_000_000]),
            )
        } else {
            (rng.range(1, 4), rng.pick(&DURATIONS[..6]))
        }
    };
    let (mut limit, mut lease_ms) = draw(rng);
    let mut lease_words = spell(rng, lease_ms);
    let mut stored: Option<(concurrency::Params, concurrency::State)> = None;
    let mut tokens: Vec<String> = vec!["unknown".into()];
    let ids = ["w1", "w2", "worker-7"];
    let mut s = Session::new();
    let mut now_us = start(rng);
    for _ in 0..24 {
        now_us = tick(rng, now_us, lease_ms.min(86_400_000));
        if rng.chance(10) {
            (limit, lease_ms) = draw(rng);
            lease_words = spell(rng, lease_ms);
        }
        if rng.chance(35) {
            // RL.CONCURRENCY.RELEASE: RTT and DROPPED change nothing on a key that is not
            // adaptive, but are read.
            let token = tokens[rng.range(0, tokens.len() as u64 - 1) as usize].clone();
            let mut words = vec![token.clone()];
            if rng.chance(30) {
                words.extend(["RTT".to_string(), rng.pick(&["2350us", "3ms", "1s"]).into()]);
            }
            if rng.chance(20) {
                words.push("DROPPED".into());
            }
            let released = match stored.as_mut() {
                None => false,
                Some((_, state)) => {
                    let done =
                        Concurrency::release(state, token.as_bytes(), now_us, Report::default());
                    if done && Concurrency::reset_after(state, now_us).ceil_ms() == 0 {
                        stored = None;
                    }
                    done
                }
            };
            s.push(
                "concurrency_release",
                now_us,
                &words,
                u8::from(released).to_string(),
            );
            continue;
        }
        let params = concurrency::Params {
            limit,
            lease_ms,
            adaptive: None,
        };
        let id = rng.chance(35).then(|| ids[rng.range(0, 2) as usize]);
        let (dryrun, shadow) = (rng.chance(20), rng.chance(20));
        let mut words = vec![limit.to_string(), lease_words.clone()];
        if let Some(id) = id {
            words.extend(["ID".to_string(), id.to_string()]);
        }
        if dryrun {
            words.push("DRYRUN".into());
        }
        if shadow {
            words.push("SHADOW".into());
        }
        let write = !dryrun;
        let id_bytes = id.map(str::as_bytes);
        let view = stored.as_mut().map(|(p, state)| (&*p, state));
        let (mut d, fresh, token) = Concurrency::acquire(&params, view, now_us, id_bytes, write);
        if d.allowed && write {
            match (stored.as_mut(), fresh) {
                (Some((p, _)), _) => *p = params,
                (None, Some(state)) => stored = Some((params, state)),
                (None, None) => {}
            }
        }
        let token = token.map(|t| String::from_utf8(t).expect("tokens here are text"));
        if let Some(t) = &token {
            if !tokens.contains(t) {
                tokens.push(t.clone());
            }
        }
        let shadow_denied = request::shadowed(&mut d, shadow);
        let extra = Some(token.as_deref().map_or("null".to_string(), quoted));
        let reply = rendered(&mut s, &d, extra, None, shadow.then_some(shadow_denied));
        s.push("concurrency_acquire", now_us, &words, reply);
    }
    let name = format!(
        "RL.CONCURRENCY.ACQUIRE{}",
        if wide { " (wide)" } else { "" }
    );
    s.case(&name, 1)
}

/// Every case of sequences.json, one per line.
pub fn generate() -> String {
    let mut rng = Rng(0x05EE_D5E0_0E2C_E540);
    let mut cases = Vec::new();
    // Each kind's cases: a case beyond the scripts' range is drawn anew (a few tries).
    let mut draw = |rng: &mut Rng, make: &dyn Fn(&mut Rng) -> Option<String>| {
        for _ in 0..20 {
            if let Some(case) = make(rng) {
                cases.push(case);
                return;
            }
        }
    };
    for _ in 0..10 {
        for entry in &ENTRIES {
            draw(&mut rng, &|rng| (entry.sequence)(rng, false));
        }
    }
    for _ in 0..8 {
        for entry in &ENTRIES {
            draw(&mut rng, &|rng| (entry.sequence)(rng, true));
        }
    }
    for _ in 0..40 {
        draw(&mut rng, &policy);
    }
    for _ in 0..20 {
        draw(&mut rng, &|rng| leases(rng, false));
    }
    for _ in 0..8 {
        draw(&mut rng, &|rng| leases(rng, true));
    }
    format!(
        "{{\"generator\": \"algorithms/src/vectors/sequences.rs\", \"cases\": [\n{}\n]}}\n",
        cases.join(",\n")
    )
}
