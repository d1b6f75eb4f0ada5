//! Policies and RL.LIMIT: RL.POLICY.SET/GET/DEL/LIST keep named lists of rules on the
//! server; RL.LIMIT checks a key against every rule of one, all or nothing.

use std::sync::Arc;

use super::{admission, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window};
use super::{token_bucket, Call};
use crate::algorithms::policy::{self, Limit, Rule, Rules, MAX_RULES};
use crate::algorithms::{penalty, Decision};
use crate::args;
use crate::error::{quote, Error};
use crate::response::{Extra, Propagate, Reply, Response};
use crate::storage::policies::{self, Policy, MAX_NAME};

/// Each algorithm a rule can name: its name, its positional arguments and their syntax.
const GRAMMAR: [(&str, usize, &str); 6] = [
    ("GCRA", 3, "burst rate period"),
    (
        "TOKENBUCKET",
        3,
        "capacity refill_amount refill_period [INTERVAL]",
    ),
    ("LEAKYBUCKET", 3, "capacity leak_amount leak_period"),
    ("FIXEDWINDOW", 2, "limit window"),
    ("SLIDINGWINDOW", 2, "limit window"),
    ("SLIDINGLOG", 2, "limit window"),
];

/// Parses rules: each an algorithm name (`GCRA` or `RL.GCRA`, any case) and its positional
/// arguments, a TOKENBUCKET rule optionally followed by `INTERVAL`. `first_position` is the
/// argument number of `words[0]`, for error texts; `log_max` bounds a SLIDINGLOG limit.
/// Returns the rules and their words as RL.POLICY.GET shows them (the algorithm upper case).
pub fn parse_rules(
    words: &[&[u8]],
    first_position: usize,
    log_max: u64,
) -> Result<(Rules, Vec<Vec<u8>>), Error> {
    let mut rules = Vec::new();
    let mut canonical = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let position = first_position + i;
        let word = words[i];
        let bare = word
            .get(..3)
            .filter(|prefix| prefix.eq_ignore_ascii_case(b"RL."))
            .map_or(word, |_| &word[3..]);
        let Some(&(name, n, usage)) = GRAMMAR
            .iter()
            .find(|(name, _, _)| name.as_bytes().eq_ignore_ascii_case(bare))
        else {
            return Err(Error::UnknownRule {
                position,
                token: quote(word),
            });
        };
        if rules.len() == MAX_RULES {
            return Err(Error::TooManyRules { max: MAX_RULES });
        }
        let a = words.get(i + 1..i + 1 + n).ok_or(Error::RuleArity {
            position,
            algorithm: name,
            usage,
        })?;
        let interval = name == "TOKENBUCKET"
            && words
                .get(i + 1 + n)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"INTERVAL"));
        let rule = match name {
            "GCRA" => gcra::params(a).map(Rule::Gcra),
            "TOKENBUCKET" => token_bucket::params(a, interval).map(Rule::TokenBucket),
            "LEAKYBUCKET" => leaky_bucket::params(a).map(Rule::LeakyBucket),
            "FIXEDWINDOW" => fixed_window::params(a).map(Rule::FixedWindow),
            "SLIDINGWINDOW" => sliding_window::params(a).map(Rule::SlidingWindow),
            _ => sliding_log::params(a, log_max).map(Rule::SlidingLog),
        }
        .map_err(|inner| Error::InRule {
            position,
            algorithm: name,
            inner: Box::new(inner),
        })?;
        rules.push(rule);
        canonical.push(name.as_bytes().to_vec());
        canonical.extend(a.iter().map(|w| w.to_vec()));
        i += 1 + n;
        if interval {
            canonical.push(b"INTERVAL".to_vec());
            i += 1;
        }
    }
    if rules.is_empty() {
        return Err(Error::Arity {
            command: "RL.POLICY.SET",
            usage: SET_USAGE,
        });
    }
    Ok((Arc::from(rules), canonical))
}

const SET_USAGE: &str =
    "name algorithm argument [argument ...] [algorithm argument [argument ...] \
                         ...], each rule an algorithm and its arguments, as in GCRA 10 10 1s \
                         FIXEDWINDOW 5000 1d";

fn policy_name(a: &[u8]) -> Result<&[u8], Error> {
    if (1..=MAX_NAME).contains(&a.len()) {
        Ok(a)
    } else {
        Err(Error::PolicyName { max: MAX_NAME })
    }
}

/// `RL.POLICY.SET name rule [rule ...]`
///
/// Creates or replaces the policy `name`. Reply: OK.
pub fn rl_policy_set(call: &Call) -> Result<Response, Error> {
    let a = call.args;
    if a.len() < 3 {
        return Err(Error::Arity {
            command: "RL.POLICY.SET",
            usage: SET_USAGE,
        });
    }
    let name = policy_name(a[1])?;
    // A replica or the AOF takes what its primary accepted, whatever its own log setting.
    let log_max = if call.ctx.replicated_or_loading() {
        crate::SLIDING_LOG_LIMIT_CEILING
    } else {
        crate::sliding_log_max_limit()
    };
    let (rules, words) = parse_rules(&a[2..], 2, log_max)?;
    policies::set(name, Policy { rules, words });
    Ok(Response::propagating(Reply::Ok, Propagate::Verbatim))
}

/// `RL.POLICY.GET name`
///
/// Reply: the policy's rules as words (algorithm names upper case), or nil.
pub fn rl_policy_get(call: &Call) -> Result<Response, Error> {
    let a = call.args;
    if a.len() != 2 {
        return Err(Error::Arity {
            command: "RL.POLICY.GET",
            usage: "name",
        });
    }
    Ok(Response::reply(match policies::get(a[1]) {
        Some(policy) => Reply::Strings(policy.words.clone()),
        None => Reply::Nil,
    }))
}

/// `RL.POLICY.DEL name`
///
/// Deletes the policy; keys written under it keep their state (RL.LIMIT with a policy of
/// the same rules picks it up again). Reply: 1 if it existed, else 0.
pub fn rl_policy_del(call: &Call) -> Result<Response, Error> {
    let a = call.args;
    if a.len() != 2 {
        return Err(Error::Arity {
            command: "RL.POLICY.DEL",
            usage: "name",
        });
    }
    let deleted = policies::delete(a[1]);
    let propagate = if deleted {
        Propagate::Verbatim
    } else {
        Propagate::Nothing
    };
    Ok(Response::propagating(
        Reply::Int(i64::from(deleted)),
        propagate,
    ))
}

/// `RL.POLICY.LIST`
///
/// Reply: the names of every policy, in byte order.
pub fn rl_policy_list(call: &Call) -> Result<Response, Error> {
    if call.args.len() != 1 {
        return Err(Error::Arity {
            command: "RL.POLICY.LIST",
            usage: "(no arguments)",
        });
    }
    let names = policies::all().into_iter().map(|(name, _)| name).collect();
    Ok(Response::reply(Reply::Strings(names)))
}

const LIMIT_USAGE: &str = "key policy [COST n] [DRYRUN] [BLOCK duration]";

/// `RL.LIMIT key policy [COST n] [DRYRUN] [BLOCK duration]`
///
/// Checks the request against every rule of the policy, with each rule's state in `key`:
/// admitted only if every rule admits it, and then every rule counts it; if any refuses,
/// nothing changes. Reply: the binding rule's `[allowed, limit, remaining, retry_after_ms,
/// reset_after_ms]` and its index in the policy (from 0) as `rule`.
pub fn rl_limit(call: &Call) -> Result<Response, Error> {
    let a = admission::arguments(call, 2, "RL.LIMIT", LIMIT_USAGE)?;
    let opts = args::options(&a[3..], 3)?;
    let policy = policies::get(a[2]).ok_or_else(|| Error::NoPolicy { name: quote(a[2]) })?;
    // The step hands back the binding rule, its decision and the clock reading.
    let check = |rules: &Rules,
                 stored: Option<(&Rules, &mut Vec<policy::RuleState>)>,
                 now_us: u64,
                 cost: u64,
                 write: bool| {
        let stored = stored.map(|(old, states)| (&old[..], states));
        let (outcome, fresh) = policy::step(rules, stored, now_us, cost, write);
        let binding: (usize, Decision, u64) = (outcome.binding, outcome.binding_decision, now_us);
        (outcome.decision, fresh, binding)
    };
    let rules = Arc::clone(&policy.rules);
    let mut decided = admission::run_with::<Limit, _>(call, c"RL.LIMIT", rules, opts, check)?;
    let (index, mut binding, now_us) = decided.aside;
    let d = &decided.decision;
    // A BLOCK penalty in force answers for the key instead of the rule.
    if d.allowed != binding.allowed || d.retry_after != binding.retry_after {
        let left = d.retry_after.map_or(0, |span| span.ceil_us());
        penalty::apply(&mut binding, now_us.saturating_add(left), now_us);
    }
    // The reply is the binding rule's; the counters and the event go by it too, as they
    // did by the reply before (it agrees with the key's decision on `allowed`).
    decided.decision = binding;
    let index = i64::try_from(index).unwrap_or(i64::MAX);
    Ok(decided.reply(Extra::Rule(index)))
}

/// What loading needs from the grammar: the rules, with the largest SLIDINGLOG limit any
/// setting allows (a saved policy was valid when it was set).
pub fn parse_saved(words: &[&[u8]]) -> Option<Rules> {
    parse_rules(words, 0, crate::SLIDING_LOG_LIMIT_CEILING)
        .ok()
        .map(|(rules, _)| rules)
}
