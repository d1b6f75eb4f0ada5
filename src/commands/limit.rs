//! RL.LIMIT: a key checked against every rule of a policy (see `policy.rs`), all or nothing.

use std::sync::Arc;

use super::{admission, command, Command, When, ONE_KEY, WRITE};
use crate::args::syntax::{admission_args, name, string, KeyUse};
use crate::args::AlgorithmCommand;
use crate::dispatch::Call;
use crate::error::{quote, Error};
use crate::response::{Extra, Response};
use crate::storage::policies;
use algorithms::rule_set::{self, RuleSet, Rules, Verdict};

pub static RL_LIMIT: Command = command! {
    name: name!("rl.limit"),
    flags: c"write deny-oom fast",
    acl: WRITE,
    keys: ONE_KEY,
    when: When::Always,
    replayable: true,
    summary: c"Admit or deny a request against every rule of a policy, all or nothing; the reply is the binding rule's",
    complexity: c"O(R) where R is the number of rules in the policy",
    key: KeyUse::Update,
    args: admission_args!(&[string(c"policy", c"the name of a policy set with RL.POLICY.SET")]),
    handler: rl_limit,
};

impl AlgorithmCommand for RuleSet {
    const NAME: &'static str = RL_LIMIT.name().as_str();
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
    let mut a = RL_LIMIT.syntax.args(call.args)?;
    let name = a.next()?;
    let opts = a.options()?;
    let policy = policies::get(name).ok_or_else(|| {
        // A cluster node that has not caught up may only not have learned it yet.
        if crate::cluster::caught_up_now(call.ctx) {
            Error::NoPolicy { name: quote(name) }
        } else {
            Error::PolicyNotYet { name: quote(name) }
        }
    })?;
    let shadow = policy.shadow;
    // The step hands back the rules' outcome: the binding rule, its own decision, and the
    // shadow rules that would have refused.
    let check = |rules: &Rules,
                 stored: Option<(&Rules, &mut Vec<rule_set::RuleState>)>,
                 now_us: u64,
                 cost: u64,
                 write: bool| {
        let stored = stored.map(|(old, states)| (&old[..], states));
        let (outcome, fresh) = rule_set::step_shadow(rules, shadow, stored, now_us, cost, write);
        (outcome.decision, fresh, outcome)
    };
    let rules = Arc::clone(&policy.rules);
    // ATMOST grants what every enforced rule admits: a shadow rule never limits it.
    let largest = |rules: &Rules, stored: Option<(&Rules, &Vec<rule_set::RuleState>)>, now_us| {
        rule_set::largest_cost_enforced(rules, shadow, stored, now_us)
    };
    let mut decided = admission::run_with::<RuleSet, _>(
        call,
        RL_LIMIT.replay_name(),
        rules,
        opts,
        check,
        largest,
    )?;
    // A BLOCK penalty (in force, or started by this request) answered for the binding rule
    // too (`request::settle`).
    let Verdict {
        binding: index,
        binding_decision: binding,
        shadow_denied: shadow_rules,
        ..
    } = decided.aside;
    let blocked = decided.blocked_until_us.is_some();
    // The reply is the binding rule's; the counters and the event go by it too, as they
    // did by the reply before (it agrees with the key's decision on `allowed`).
    let enforced_admits = binding.allowed;
    decided.decision = binding;
    // A shadow rule's refusal counts only where it would have changed the answer.
    let shadow_rules = if enforced_admits { shadow_rules } else { 0 };
    decided.shadow_rule_denied = shadow_rules != 0;
    let response = decided.reply(Extra::Rule(i64::try_from(index).unwrap_or(i64::MAX)));
    let outcome = response.reply.outcome();
    // A rule is counted as the one that denied only when its own decision stood: a denial a
    // block answered is the block's.
    let denied_by = (!enforced_admits && !blocked).then_some(index);
    policy.stats.count(outcome, denied_by, shadow_rules);
    Ok(response)
}
