//! Policies and RL.LIMIT: RL.POLICY.SET/GET/DEL/LIST keep named lists of rules on the
//! server; RL.LIMIT checks a key against every rule of one, all or nothing.

use std::cell::Cell;
use std::sync::Arc;

use redis_module::raw;

use super::{admission, Call};
use crate::algorithms::policy::{self, Limit, Rules};
use crate::algorithms::{penalty, Decision};
use crate::args::syntax::{RL_LIMIT, RL_POLICY_DEL, RL_POLICY_GET, RL_POLICY_LIST, RL_POLICY_SET};
use crate::args::{self, rules};
use crate::error::{quote, Error};
use crate::reply;
use crate::storage::policies::{self, Policy, MAX_NAME};

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
pub fn rl_policy_set(call: &Call) -> Result<(), Error> {
    let a = call.args;
    if a.len() < 3 {
        return Err(RL_POLICY_SET.arity());
    }
    let name = policy_name(a[1])?;
    // A replica or the AOF takes what its primary accepted, whatever its own log setting.
    let log_max = match super::context_flags(call.ctx)
        & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
    {
        0 => crate::config::sliding_log_max_limit(),
        _ => crate::config::SLIDING_LOG_LIMIT_CEILING,
    };
    let (rules, words) = rules::parse(&a[2..], 2, log_max)?;
    policies::set(name, Policy { rules, words });
    replicate_verbatim(call);
    reply::ok(call.ctx);
    Ok(())
}

/// `RL.POLICY.GET name`
///
/// Reply: the policy's rules as words (algorithm names upper case), or nil.
pub fn rl_policy_get(call: &Call) -> Result<(), Error> {
    let a = call.args;
    if a.len() != 2 {
        return Err(RL_POLICY_GET.arity());
    }
    match policies::get(a[1]) {
        Some(policy) => reply::strings(call.ctx, policy.words.iter().map(Vec::as_slice)),
        None => reply::null(call.ctx),
    }
    Ok(())
}

/// `RL.POLICY.DEL name`
///
/// Deletes the policy; keys written under it keep their state (RL.LIMIT with a policy of
/// the same rules picks it up again). Reply: 1 if it existed, else 0.
pub fn rl_policy_del(call: &Call) -> Result<(), Error> {
    let a = call.args;
    if a.len() != 2 {
        return Err(RL_POLICY_DEL.arity());
    }
    let deleted = policies::delete(a[1]);
    if deleted {
        replicate_verbatim(call);
    }
    reply::integer(call.ctx, i64::from(deleted));
    Ok(())
}

/// `RL.POLICY.LIST`
///
/// Reply: the names of every policy, in byte order.
pub fn rl_policy_list(call: &Call) -> Result<(), Error> {
    if call.args.len() != 1 {
        return Err(RL_POLICY_LIST.arity());
    }
    let all = policies::all();
    reply::strings(call.ctx, all.iter().map(|(name, _)| name.as_slice()));
    Ok(())
}

fn replicate_verbatim(call: &Call) {
    policies::flush_pending(call.ctx);
    // SAFETY: ctx is the running command's context.
    unsafe {
        raw::RedisModule_ReplicateVerbatim.unwrap()(call.ctx);
    }
}

/// `RL.LIMIT key policy [COST n] [DRYRUN] [BLOCK duration]`
///
/// Checks the request against every rule of the policy, with each rule's state in `key`:
/// admitted only if every rule admits it, and then every rule counts it; if any refuses,
/// nothing changes. Reply: the binding rule's `[allowed, limit, remaining, retry_after_ms,
/// reset_after_ms]` and its index in the policy (from 0) as `rule`.
pub fn rl_limit(call: &Call) -> Result<(), Error> {
    let a = admission::arguments(call, &RL_LIMIT)?;
    let opts = args::options(&a[3..], 3)?;
    let policy = policies::get(a[2]).ok_or_else(|| Error::NoPolicy { name: quote(a[2]) })?;
    // The binding rule and the clock reading, from the step to the reply.
    let seen: Cell<Option<(usize, Decision, u64)>> = Cell::new(None);
    let check = |rules: &Rules,
                 stored: Option<(&Rules, &mut Vec<policy::RuleState>)>,
                 now_us: u64,
                 cost: u64,
                 write: bool| {
        let stored = stored.map(|(old, states)| (&old[..], states));
        let (outcome, fresh) = policy::step(rules, stored, now_us, cost, write);
        seen.set(Some((outcome.binding, outcome.binding_decision, now_us)));
        (outcome.decision, fresh)
    };
    let rules = Arc::clone(&policy.rules);
    admission::run_with::<Limit>(call, c"RL.LIMIT", rules, opts, check, |ctx, d| {
        let Some((index, mut binding, now_us)) = seen.get() else {
            return reply::error(ctx, &Error::Panic);
        };
        // A BLOCK penalty in force answers for the key instead of the rule.
        if d.allowed != binding.allowed || d.retry_after != binding.retry_after {
            let left = d.retry_after.map_or(0, |span| span.ceil_us());
            penalty::apply(&mut binding, now_us.saturating_add(left), now_us);
        }
        let index = i64::try_from(index).unwrap_or(i64::MAX);
        reply::admission(ctx, &binding, Some(("rule", reply::Extra::Int(index))))
    })
}
