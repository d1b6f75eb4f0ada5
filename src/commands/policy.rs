//! RL.POLICY.SET/GET/DEL/LIST: named lists of rules kept on the server (the table is
//! `storage::policies`), which RL.LIMIT (`limit.rs`) checks a key against.

use std::ffi::CStr;

use super::{command, Command, When, CONFIG, NO_KEYS, READ, READ_FAST};
use crate::args::rules;
use crate::args::syntax::{arg, name, string, token, Arg, KeyUse, Kind};
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

const RULES_COMPLEXITY: &CStr = c"O(R) where R is the number of rules";
const POLICY_NAME: Arg = string(c"name", c"the policy's name");

pub static RL_POLICY_SET: Command = command! {
    name: name!("rl.policy.set"),
    flags: c"write deny-oom",
    acl: CONFIG,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Create or replace a policy: a named list of rules, each an algorithm and its arguments",
    complexity: RULES_COMPLEXITY,
    key: KeyUse::None,
    args: &[
        POLICY_NAME,
        arg(c"rule", Kind::Block(&[
            token(c"shadow", c"SHADOW", c"a shadow rule: checked and counted, but it never denies").optional(),
            string(c"algorithm", c"an algorithm, as its command is named without RL. (gcra, tokenbucket, ...)"),
            string(c"argument", c"the algorithm's positional arguments, as its command takes them after the key").multiple(),
        ]), c"an algorithm and its arguments").multiple(),
    ],
    note: ", each rule an algorithm and its arguments, as in GCRA 10 10 1s FIXEDWINDOW 5000 1d (SHADOW before a rule: checked and counted, never denying)",
    handler: rl_policy_set,
};

/// `RL.POLICY.SET name rule [rule ...]`
///
/// Creates or replaces the policy `name`. Reply: OK.
pub fn rl_policy_set(call: &Call) -> Result<Response, Error> {
    let mut a = RL_POLICY_SET.syntax.args(call.args)?;
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

pub static RL_POLICY_GET: Command = command! {
    name: name!("rl.policy.get"),
    flags: c"readonly fast",
    acl: READ_FAST,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Show the rules of a policy",
    complexity: RULES_COMPLEXITY,
    key: KeyUse::None,
    args: &[POLICY_NAME],
    handler: rl_policy_get,
};

/// `RL.POLICY.GET name`
///
/// Reply: the policy's rules as words (algorithm names upper case), or nil.
pub fn rl_policy_get(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_GET.syntax.args_bounded(call.args)?.next()?;
    Ok(Response::reply(match policies::get(name) {
        Some(policy) => Reply::Strings(policy.words.clone()),
        None => Reply::Nil,
    }))
}

pub static RL_POLICY_DEL: Command = command! {
    name: name!("rl.policy.del"),
    flags: c"write fast",
    acl: CONFIG,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Delete a policy",
    complexity: RULES_COMPLEXITY,
    key: KeyUse::None,
    args: &[POLICY_NAME],
    handler: rl_policy_del,
};

/// `RL.POLICY.DEL name`
///
/// Deletes the policy; keys written under it keep their state (RL.LIMIT with a policy of
/// the same rules picks it up again). Reply: 1 if it existed, else 0.
pub fn rl_policy_del(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_DEL.syntax.args_bounded(call.args)?.next()?;
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

pub static RL_POLICY_LIST: Command = command! {
    name: name!("rl.policy.list"),
    flags: c"readonly",
    acl: READ,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"List the names of the policies",
    complexity: c"O(P) where P is the number of policies",
    key: KeyUse::None,
    args: &[],
    handler: rl_policy_list,
};

/// `RL.POLICY.LIST`
///
/// Reply: the names of every policy, in byte order.
pub fn rl_policy_list(call: &Call) -> Result<Response, Error> {
    RL_POLICY_LIST.syntax.args_bounded(call.args)?;
    let names = policies::all().into_iter().map(|(name, _)| name).collect();
    Ok(Response::reply(Reply::Strings(names)))
}
