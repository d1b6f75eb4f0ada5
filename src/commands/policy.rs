//! RL.POLICY.SET/GET/DEL/LIST/FORCE: named lists of rules kept on the server (the table is
//! `storage::policies`), which RL.LIMIT (`limit.rs`) checks a key against.

use std::ffi::CStr;

use super::{command, Command, When, CONFIG, NO_KEYS, PRIVILEGED, READ, READ_FAST};
use crate::args::rules;
use crate::args::syntax::{arg, name, string, token, Arg, KeyUse, Kind};
use crate::cluster;
use crate::dispatch::Call;
use crate::error::{quote, Error};
use crate::log::{Level, Throttle};
use crate::response::{Propagate, Reply, Response};
use crate::storage::policies::{
    self, Content, Held, Policy, Version, Versioned, MAX_NAME, NODE_ID_LEN, STANDALONE,
};

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

/// How a change made here goes to replicas and the AOF: verbatim on a standalone server, as
/// RL.POLICY.SYNC with its version on a cluster node (which also tells every other node).
/// A change made here must not be acknowledged before this node has caught up with the
/// cluster's policies (docs/cluster.md, Catching up): it could lose to a change it has not
/// learned yet. A replica's stream and the AOF are not clients: they always apply.
fn may_change(call: &Call) -> Result<(), Error> {
    if call.ctx.replicated_or_loading() || cluster::caught_up_now(call.ctx) {
        Ok(())
    } else {
        Err(Error::PolicyChangeNotYet)
    }
}

fn changed() -> Propagate {
    if cluster::enabled() {
        Propagate::PolicyChange
    } else {
        Propagate::Verbatim
    }
}

/// `RL.POLICY.SET name rule [rule ...]`
///
/// Creates or replaces the policy `name`; on a cluster, on every node. Reply: OK.
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
    may_change(call)?;
    let policy = Policy::new(parsed.rules, parsed.shadow, parsed.words);
    let bounded = !call.ctx.replicated_or_loading();
    if let Err(full) = policies::set(name, policy, cluster::node_id(), bounded) {
        FULL_LOGGED.log(Some(call.ctx), Level::Warning, || {
            format!(
                "refusing RL.POLICY.SET of '{}': the policies table is full ({} policies, \
                 ratelimit.max-policies)",
                quote(name),
                full.max
            )
        });
        return Err(Error::PoliciesFull { max: full.max });
    }
    Ok(Response::propagating(Reply::Ok, changed()))
}

/// So that a client looping on a full table writes a line a second at most.
static FULL_LOGGED: Throttle = Throttle::new();

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
/// Reply: the policy's rules as words (algorithm names upper case), or nil (on a cluster node
/// that has not caught up with the cluster's policies, TRYAGAIN instead of nil).
pub fn rl_policy_get(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_GET.syntax.args_bounded(call.args)?.next()?;
    Ok(Response::reply(match policies::get(name) {
        Some(policy) => Reply::Strings(policy.words.clone()),
        // A cluster node that has not caught up may only not have learned it yet.
        None if !cluster::caught_up_now(call.ctx) => {
            return Err(Error::PolicyNotYet { name: quote(name) })
        }
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
/// Deletes the policy (on a cluster, on every node: a tombstone stays for a day, see
/// docs/cluster.md); keys written under it keep their state (RL.LIMIT with a policy of the
/// same rules picks it up again). Reply: 1 if it existed, else 0.
pub fn rl_policy_del(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_DEL.syntax.args_bounded(call.args)?.next()?;
    may_change(call)?;
    let deleted = policies::delete(
        name,
        cluster::node_id(),
        cluster::now_ms(),
        cluster::enabled(),
    )
    .is_some();
    let propagate = if deleted {
        changed()
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

pub static RL_POLICY_FORCE: Command = command! {
    name: name!("rl.policy.force"),
    flags: c"write fast",
    acl: CONFIG,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Make this node's policy of a name (or its deletion) win on every node of a cluster, over any version the cluster holds",
    complexity: RULES_COMPLEXITY,
    key: KeyUse::None,
    args: &[POLICY_NAME],
    handler: rl_policy_force,
};

/// `RL.POLICY.FORCE name`
///
/// On a cluster node: what this node holds for `name`, its rules or its deletion (a
/// tombstone), gets a version a second under the most this node takes from others
/// (`ratelimit.policy-max-ahead` ahead of its clock), and goes to every node, where it wins
/// over any version a node took (docs/cluster.md, Policies). For the operator whose change
/// keeps losing to a version ahead of the clocks. Reply: 1, or 0 when this node holds
/// nothing for `name`. On a standalone server nothing changes: 1 if the policy exists.
pub fn rl_policy_force(call: &Call) -> Result<Response, Error> {
    let name = RL_POLICY_FORCE.syntax.args_bounded(call.args)?.next()?;
    if !cluster::enabled() {
        return Ok(Response::reply(Reply::Int(i64::from(
            policies::get(name).is_some(),
        ))));
    }
    may_change(call)?;
    Ok(match policies::force(name, cluster::node_id()) {
        Some(_) => Response::propagating(Reply::Int(1), Propagate::PolicyChange),
        None => Response::reply(Reply::Int(0)),
    })
}

pub static RL_POLICY_SYNC: Command = command! {
    name: name!("rl.policy.sync"),
    flags: c"write",
    acl: PRIVILEGED,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"Internal: a policy change with its version, as a cluster node sends it to its replicas and the AOF; accepted only from replication or the AOF",
    complexity: RULES_COMPLEXITY,
    key: KeyUse::None,
    args: &[
        POLICY_NAME,
        string(c"clock", c"the change's logical clock"),
        string(c"node", c"the id of the node that made the change"),
        string(c"change", c"SET and the policy's rules, or DEL and the time of the delete in ms"),
        string(c"argument", c"the rules' words, or the time").multiple(),
    ],
    handler: rl_policy_sync,
};

/// `RL.POLICY.SYNC name clock node SET rule... | DEL deleted_at_ms` (internal)
///
/// Applies a change made on a cluster node, with its version: it replaces what `name` holds
/// only when newer (storage::policies). Reply: OK.
pub fn rl_policy_sync(call: &Call) -> Result<Response, Error> {
    if !call.ctx.replicated_or_loading() {
        return Err(Error::InternalOnly {
            command: RL_POLICY_SYNC.name().as_str(),
        });
    }
    let (name, held) =
        sync_change(call.args.get(1..).unwrap_or_default()).ok_or(Error::BadPolicySync)?;
    policies::merge_loaded(name, held);
    Ok(Response::propagating(Reply::Ok, Propagate::Verbatim))
}

/// The change RL.POLICY.SYNC's words say, or None.
fn sync_change<'a>(words: &'a [&'a [u8]]) -> Option<(&'a [u8], Held)> {
    let [name, clock, node, kind, rest @ ..] = words else {
        return None;
    };
    policy_name(name).ok()?;
    let clock = crate::digits::digits(clock)?;
    if !cluster::wire::is_node_id(node) {
        return None;
    }
    let mut id = STANDALONE;
    id.copy_from_slice(node.get(..NODE_ID_LEN)?);
    let content = if kind.eq_ignore_ascii_case(b"SET") {
        let words = rest.iter().map(|w| w.to_vec()).collect();
        Content::Live(std::sync::Arc::new(policies::parse_words(words)?))
    } else if kind.eq_ignore_ascii_case(b"DEL") {
        let [at] = rest else {
            return None;
        };
        Content::Tombstone {
            deleted_at_ms: crate::digits::digits(at)?,
        }
    } else {
        return None;
    };
    Some((
        name,
        Versioned {
            version: Version { clock, node: id },
            content,
        },
    ))
}
