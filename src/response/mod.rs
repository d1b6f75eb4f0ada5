//! What a command's handler returns: what happened, as a value. The dispatcher
//! (`crate::dispatch`) renders it (RESP2 or RESP3, see [`render`]), counts it in the
//! command's `INFO ratelimit` counters, publishes a client's denial as a keyspace event, and
//! propagates the write it says to propagate. Counting and publishing are derived here, from
//! the value alone, so a command cannot forget them and they can be tested without a server.
//!
//! Nothing here allocates for an admission: the decision and its extra field sit in the
//! value (a lease token is the one the algorithm already made).

pub mod render;

use std::ffi::CStr;

use crate::metrics::Counted;
use algorithms::Decision;

/// Clamps to the i64 range of a RESP integer.
pub fn int(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// A handler's result: the reply, and what to propagate to replicas and the AOF.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub reply: Reply,
    pub propagate: Propagate,
}

impl Response {
    /// The reply, propagating nothing.
    pub fn reply(reply: Reply) -> Response {
        Response {
            reply,
            propagate: Propagate::Nothing,
        }
    }

    /// The reply, and the write to propagate.
    pub fn propagating(reply: Reply, propagate: Propagate) -> Response {
        Response { reply, propagate }
    }
}

/// What a call replies.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// The five-field admission reply, plus the command's extra field.
    Admission(Admission),
    /// redis-cell's CL.THROTTLE array (`extra` is always [`Extra::None`]).
    RedisCell(Admission),
    Int(i64),
    /// Two integers, an array in RESP2 and RESP3 alike (RL.COUNTER's `[count, pttl]`).
    IntPair(i64, i64),
    Nil,
    Ok,
    /// An array of bulk strings (RL.POLICY.GET's words, RL.POLICY.LIST's names).
    Strings(Vec<Vec<u8>>),
    /// RL.INSPECT's map.
    Inspect(Inspection),
    /// RL.TOP's entries, most denied first.
    Top(Vec<TopEntry>),
}

/// One key RL.TOP lists.
#[derive(Debug, PartialEq, Eq)]
pub struct TopEntry {
    pub key: Vec<u8>,
    pub count: u64,
    pub error: u64,
}

/// An admission decision and what the reply and the counters need besides it.
#[derive(Debug, PartialEq, Eq)]
pub struct Admission {
    pub decision: Decision,
    pub extra: Extra,
    /// `ATMOST n`: the units granted (0 when denied), a field after the command's own.
    pub granted: Option<u64>,
    /// A DRYRUN or COST 0: it asks what would happen, so it counts as a call only and its
    /// denial publishes nothing.
    pub preview: bool,
    /// RL.REPLAY replaying the primary's (or the AOF's) write: counted as usual, but a
    /// denial publishes nothing (the primary published it, for its client).
    pub replayed: bool,
    /// The call gave `SHADOW`: the reply ends with the field `shadow_denied`.
    pub shadow: bool,
    /// A limit would have denied the request, which is answered as admitted: a SHADOW
    /// call's denial (`decision.allowed` is then already 1), or a policy's shadow rule.
    /// Counted as a shadow denial and published as `ratelimit.shadow_denied`.
    pub shadow_denied: bool,
}

/// The sixth field some admission replies add, named by its variant.
#[derive(Debug, PartialEq, Eq)]
pub enum Extra {
    None,
    /// RL.LEAKYBUCKET's `delay_ms`.
    DelayMs(i64),
    /// RL.CONCURRENCY.ACQUIRE's `token` (nil when denied or DRYRUN).
    Token(Option<Vec<u8>>),
    /// RL.LIMIT's `rule`: the binding rule's index in the policy.
    Rule(i64),
}

impl Extra {
    /// Its field name and whether there is one.
    pub fn name(&self) -> Option<&'static str> {
        match self {
            Extra::None => None,
            Extra::DelayMs(_) => Some("delay_ms"),
            Extra::Token(_) => Some("token"),
            Extra::Rule(_) => Some("rule"),
        }
    }
}

/// RL.INSPECT's reply: the algorithm, its fields, and for an RL.LIMIT key each rule's.
#[derive(Debug, PartialEq, Eq)]
pub struct Inspection {
    pub algorithm: &'static str,
    /// An adaptive concurrency key's algorithm (`aimd`, `vegas`, `gradient2`), shown after
    /// `algorithm`.
    pub adaptive: Option<&'static str>,
    pub fields: Vec<(&'static str, i64)>,
    pub rules: Vec<Described>,
}

/// One rule of an RL.LIMIT key as RL.INSPECT shows it: its algorithm and fields.
pub type Described = (&'static str, Vec<(&'static str, i64)>);

/// What a call sends to replicas and the AOF (after its key is closed, policies a fork
/// asked for first: see `storage::policies::flush_pending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagate {
    /// Nothing (a read, a denial, a preview, an error).
    Nothing,
    /// The command as it came (a policy change on a standalone server, RL.LOADSTATE, a
    /// replayed write passed on).
    Verbatim,
    /// A policy change on a cluster node (the policy named by the call's first argument): to
    /// replicas and the AOF as `RL.POLICY.SYNC` with its version, and to every other node of
    /// the cluster over the bus.
    PolicyChange,
    /// RL.COUNTER's write, as its result: `SET key count PXAT expire_at_ms`, so that
    /// replicas and the AOF hold the same value and expiry instant, never "now" read again.
    SetCounter { count: i64, expire_at_ms: u64 },
    /// A client's write, as `RL.REPLAY key now_us:expire_at_ms:COMMAND:arg2 arg3...`: the
    /// primary's clock reading and the key's absolute expiry, never "now" read again.
    Replay {
        command: &'static CStr,
        now_us: u64,
        expire_at_ms: u64,
    },
}

impl Reply {
    /// What the call counts as in `INFO ratelimit`, besides a call.
    pub fn outcome(&self) -> Counted {
        match self {
            Reply::Admission(a) | Reply::RedisCell(a) if !a.preview => {
                if !a.decision.allowed {
                    Counted::Denied
                } else if a.shadow_denied {
                    Counted::ShadowDenied
                } else {
                    Counted::Admitted
                }
            }
            _ => Counted::Other,
        }
    }

    /// Whether the call is a client's request that a limit would have denied but that was
    /// answered as admitted (SHADOW, or a policy's shadow rule), which publishes
    /// `ratelimit.shadow_denied` on its key: not a preview, not replayed.
    pub fn publishes_shadow_denial(&self) -> bool {
        match self {
            Reply::Admission(a) => {
                a.decision.allowed && a.shadow_denied && !a.preview && !a.replayed
            }
            _ => false,
        }
    }

    /// Whether the call denied a client's request, which publishes `ratelimit.denied` on
    /// its key: not a preview, not a replayed denial.
    pub fn publishes_denial(&self) -> bool {
        match self {
            Reply::Admission(a) | Reply::RedisCell(a) => {
                !a.decision.allowed && !a.preview && !a.replayed
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use algorithms::Span;

    fn admission(allowed: bool, preview: bool, replayed: bool) -> Admission {
        Admission {
            decision: Decision {
                allowed,
                limit: 5,
                remaining: 0,
                retry_after: Some(Span::ZERO),
                reset_after: Span::ZERO,
                delay: None,
            },
            extra: Extra::None,
            granted: None,
            preview,
            replayed,
            shadow: false,
            shadow_denied: false,
        }
    }

    #[test]
    fn a_shadow_denial_is_counted_and_published_as_one() {
        let mut a = admission(true, false, false);
        a.shadow = true;
        a.shadow_denied = true;
        let reply = Reply::Admission(a);
        assert_eq!(reply.outcome(), Counted::ShadowDenied);
        assert!(!reply.publishes_denial());
        assert!(reply.publishes_shadow_denial());
        let mut preview = admission(true, true, false);
        preview.shadow_denied = true;
        let reply = Reply::Admission(preview);
        assert_eq!(reply.outcome(), Counted::Other);
        assert!(!reply.publishes_shadow_denial());
        let mut replayed = admission(true, false, true);
        replayed.shadow_denied = true;
        let reply = Reply::Admission(replayed);
        assert_eq!(reply.outcome(), Counted::ShadowDenied);
        assert!(!reply.publishes_shadow_denial());
        // SHADOW given, nothing would deny: an admission like any other.
        let mut plain = admission(true, false, false);
        plain.shadow = true;
        assert_eq!(Reply::Admission(plain).outcome(), Counted::Admitted);
    }

    #[test]
    fn counting_and_the_denial_event_derive_from_the_reply() {
        // (allowed, preview, replayed) -> (counted as, publishes a denial)
        let cases = [
            ((true, false, false), (Counted::Admitted, false)),
            ((false, false, false), (Counted::Denied, true)),
            ((true, true, false), (Counted::Other, false)),
            ((false, true, false), (Counted::Other, false)),
            ((true, false, true), (Counted::Admitted, false)),
            ((false, false, true), (Counted::Denied, false)),
            ((false, true, true), (Counted::Other, false)),
        ];
        for ((allowed, preview, replayed), (outcome, publishes)) in cases {
            for reply in [
                Reply::Admission(admission(allowed, preview, replayed)),
                Reply::RedisCell(admission(allowed, preview, replayed)),
            ] {
                assert_eq!(reply.outcome(), outcome, "{reply:?}");
                assert_eq!(reply.publishes_denial(), publishes, "{reply:?}");
            }
        }
        for other in [
            Reply::Int(0),
            Reply::Nil,
            Reply::Ok,
            Reply::Strings(vec![b"a".to_vec()]),
            Reply::Inspect(Inspection {
                algorithm: "gcra",
                adaptive: None,
                fields: Vec::new(),
                rules: Vec::new(),
            }),
        ] {
            assert_eq!(other.outcome(), Counted::Other);
            assert!(!other.publishes_denial());
        }
    }

    #[test]
    fn int_clamps_to_a_resp_integer() {
        assert_eq!(int(0), 0);
        assert_eq!(int(i64::MAX as u64), i64::MAX);
        assert_eq!(int(i64::MAX as u64 + 1), i64::MAX);
        assert_eq!(int(u64::MAX), i64::MAX);
    }

    #[test]
    fn extra_fields_are_named_by_their_kind() {
        assert_eq!(Extra::None.name(), None);
        assert_eq!(Extra::DelayMs(-1).name(), Some("delay_ms"));
        assert_eq!(Extra::Token(None).name(), Some("token"));
        assert_eq!(Extra::Rule(0).name(), Some("rule"));
    }
}
