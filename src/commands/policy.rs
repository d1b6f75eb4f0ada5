//! RL.POLICY.SET/GET/DEL/LIST: named lists of rules kept on the server (the table is
//! `storage::policies`), which RL.LIMIT (`limit.rs`) checks a key against.

use crate::args::rules;
use crate::args::syntax::{RL_POLICY_DEL, RL_POLICY_GET, RL_POLICY_LIST, RL_POLICY_SET};
use crate::dispatch::Call;
use crate::error::Error;
use crate::response::{Propagate, Reply, Response};
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
pub fn rl_policy_set(call: &Call) -> Result<Response, Error> {
    let mut a = RL_POLICY_SET.args(call.args)?;
    let name = policy_name(a.next()?)?;
    // A replica or the AOF takes what its primary accepted, whatever its own log setting.
    let log_max = if call.ctx.replicated_or_loading() {
        crate::config::SLIDING_LOG_LIMIT_CEILING
    } else {
        crate::config::sliding_log_max_limit()
    };
    let parsed = rules::parse(&mut a, log_max)?;
    policies::set(name, Policy::new(parsed.rules, parsed.shadow, parsed.words));
    Ok(Response::propagating(Reply::Ok, Propagate::Verbatim))
}

/// `RL.POLICY.GET name`
///
/// Reply: the policy's rules as words (algorithm names upper case), or nil.
pub fn rl_policy_get(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_GET.args_bounded(call.args)?.next()?;
    Ok(Response::reply(match policies::get(name) {
        Some(policy) => Reply::Strings(policy.words.clone()),
        None => Reply::Nil,
    }))
}

/// `RL.POLICY.DEL name`
///
/// Deletes the policy; keys written under it keep their state (RL.LIMIT with a policy of
/// the same rules picks it up again). Reply: 1 if it existed, else 0.
pub fn rl_policy_del(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_DEL.args_bounded(call.args)?.next()?;
    let deleted = policies::delete(name);
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
    RL_POLICY_LIST.args_bounded(call.args)?;
    let names = policies::all().into_iter().map(|(name, _)| name).collect();
    Ok(Response::reply(Reply::Strings(names)))
}
