//! Policies and RL.LIMIT: RL.POLICY.SET/GET/DEL/LIST keep named lists of rules on the
//! server; RL.LIMIT checks a key against every rule of one, all or nothing.

use std::sync::Arc;

use super::{admission, Call};
use crate::args::syntax::{RL_LIMIT, RL_POLICY_DEL, RL_POLICY_GET, RL_POLICY_LIST, RL_POLICY_SET};
use crate::args::{self, rules};
use crate::error::{quote, Error};
use crate::response::{Extra, Propagate, Reply, Response};
use crate::storage::policies::{self, Policy, MAX_NAME};
use algorithms::rule_set::{self as policy, Limit, Rules};
use algorithms::{penalty, Decision};

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
        return Err(RL_POLICY_SET.arity());
    }
    let name = policy_name(a[1])?;
    // A replica or the AOF takes what its primary accepted, whatever its own log setting.
    let log_max = if call.ctx.replicated_or_loading() {
        crate::config::SLIDING_LOG_LIMIT_CEILING
    } else {
        crate::config::sliding_log_max_limit()
    };
    let parsed = rules::parse(&a[2..], 2, log_max)?;
    policies::set(name, Policy::new(parsed.rules, parsed.shadow, parsed.words));
    Ok(Response::propagating(Reply::Ok, Propagate::Verbatim))
}

/// `RL.POLICY.GET name`
///
/// Reply: the policy's rules as words (algorithm names upper case), or nil.
pub fn rl_policy_get(call: &Call) -> Result<Response, Error> {
    let a = call.args;
    if a.len() != 2 {
        return Err(RL_POLICY_GET.arity());
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
        return Err(RL_POLICY_DEL.arity());
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
        return Err(RL_POLICY_LIST.arity());
    }
    let names = policies::all().into_iter().map(|(name, _)| name).collect();
    Ok(Response::reply(Reply::Strings(names)))
}

/// `RL.LIMIT key policy [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`
///
/// Checks the request against every rule of the policy, with each rule's state in `key`:
/// admitted only if every rule admits it, and then every rule counts it; if any refuses,
/// nothing changes. A shadow rule (`SHADOW` before it in the policy) is checked too but
/// never refuses; it counts the request only when it admits it itself. Reply: the binding
/// rule's `[allowed, limit, remaining, retry_after_ms, reset_after_ms]` and its index in the
/// policy (from 0) as `rule`, then `shadow_denied` with SHADOW (1 when any rule, shadow or
/// not, would have denied). The policy's counters count the call (`INFO ratelimit`).
pub fn rl_limit(call: &Call) -> Result<Response, Error> {
    let a = admission::arguments(call, &RL_LIMIT)?;
    let opts = args::options(&a[3..], 3)?;
    let policy = policies::get(a[2]).ok_or_else(|| Error::NoPolicy { name: quote(a[2]) })?;
    let shadow = policy.shadow;
    // The step hands back the binding rule, its decision, the clock reading and the shadow
    // rules that would have refused.
    let check = |rules: &Rules,
                 stored: Option<(&Rules, &mut Vec<policy::RuleState>)>,
                 now_us: u64,
                 cost: u64,
                 write: bool| {
        let stored = stored.map(|(old, states)| (&old[..], states));
        let (outcome, fresh) = policy::step_shadow(rules, shadow, stored, now_us, cost, write);
        let binding: (usize, Decision, u64, u32) = (
            outcome.binding,
            outcome.binding_decision,
            now_us,
            outcome.shadow_denied,
        );
        (outcome.decision, fresh, binding)
    };
    let rules = Arc::clone(&policy.rules);
    // ATMOST grants what every enforced rule admits: a shadow rule never limits it.
    let largest = |rules: &Rules, stored: Option<(&Rules, &Vec<policy::RuleState>)>, now_us| {
        policy::largest_cost_enforced(rules, shadow, stored, now_us)
    };
    let mut decided =
        admission::run_with::<Limit, _>(call, c"RL.LIMIT", rules, opts, check, largest)?;
    let (index, mut binding, now_us, shadow_rules) = decided.aside;
    let d = &decided.decision;
    // A BLOCK penalty in force answers for the key instead of the rule.
    let penalty = d.allowed != binding.allowed || d.retry_after != binding.retry_after;
    if penalty {
        let left = d.retry_after.map_or(0, |span| span.ceil_us());
        penalty::apply(&mut binding, now_us.saturating_add(left), now_us);
    }
    // The reply is the binding rule's; the counters and the event go by it too, as they
    // did by the reply before (it agrees with the key's decision on `allowed`).
    let enforced_admits = binding.allowed;
    decided.decision = binding;
    // A shadow rule's refusal counts only where it would have changed the answer.
    let shadow_rules = if enforced_admits { shadow_rules } else { 0 };
    decided.shadow_rule_denied = shadow_rules != 0;
    let response = decided.reply(Extra::Rule(i64::try_from(index).unwrap_or(i64::MAX)));
    let outcome = response.reply.outcome();
    let denied_by = (!enforced_admits && !penalty).then_some(index);
    policy.stats.count(outcome, denied_by, shadow_rules);
    Ok(response)
}
