//! From the module's decisions to what the service answers, as envoyproxy/ratelimit answers: a
//! status per descriptor (its code, its limit, what remains, the seconds until the window
//! resets), the request's overall code, and the three response headers it may add.

use crate::rules::Unit;

/// The module's five fields for one descriptor's call (an admission command, or RL.LIMIT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
}

/// A status's code (the API's `Code`: OK 1, OVER_LIMIT 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

/// What the answer says of one descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    /// The rule's `requests_per_unit`, unit and name; none where no rule applied (and for an
    /// unlimited one).
    pub limit: Option<(u32, Unit, Option<String>)>,
    /// What remains (0 when refused); `u32::MAX` for an unlimited rule.
    pub remaining: u32,
    /// Whole seconds until the window resets (none without a limit).
    pub reset_seconds: Option<u64>,
    /// Refused, but the rule is in shadow mode: answered OK, counted as refused.
    pub shadow_denied: bool,
}

impl Status {
    /// No rule for the descriptor (or one that another `replaces`).
    pub fn no_limit() -> Status {
        Status {
            code: Code::Ok,
            limit: None,
            remaining: 0,
            reset_seconds: None,
            shadow_denied: false,
        }
    }

    /// An unlimited rule: OK, all of `u32` remaining, no call made.
    pub fn unlimited() -> Status {
        Status {
            remaining: u32::MAX,
            ..Status::no_limit()
        }
    }

    /// A rule's status from the module's decision; `limit` is the rule's `requests_per_unit`,
    /// unit and name. Refused under a rule in shadow mode is OK.
    pub fn of(limit: (u32, Unit, Option<String>), shadow_mode: bool, d: &Decision) -> Status {
        let refused = !d.allowed;
        Status {
            code: if refused && !shadow_mode {
                Code::OverLimit
            } else {
                Code::Ok
            },
            limit: Some(limit),
            remaining: if refused {
                0
            } else {
                u32::try_from(d.remaining).unwrap_or(u32::MAX)
            },
            reset_seconds: Some(ceil_seconds(d.reset_after_ms)),
            shadow_denied: refused && shadow_mode,
        }
    }
}

/// The units a descriptor costs: its own `hits_addend` when Envoy sent one (0 too: a check that
/// takes nothing), else the request's, at least 1.
pub fn hits(request: u32, descriptor: Option<u64>) -> u64 {
    descriptor.unwrap_or_else(|| u64::from(request.max(1)))
}

/// The request's code: OVER_LIMIT when a status is, unless the service is in shadow mode
/// (`SHADOW_MODE`), which answers OK and leaves the statuses as they are.
pub fn overall(statuses: &[Status], shadow_mode: bool) -> Code {
    if !shadow_mode && statuses.iter().any(|s| s.code == Code::OverLimit) {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// The three response headers (`LIMIT_RESPONSE_HEADERS_ENABLED`, `names` the limit's, the
/// remaining's and the reset's), of one descriptor: the last refused one, else the first with
/// the least remaining among those with a limit; none when no descriptor has a limit.
pub fn headers(statuses: &[Status], names: &[String; 3]) -> Vec<(String, String)> {
    let mut chosen: Option<&Status> = None;
    for s in statuses.iter().filter(|s| s.limit.is_some()) {
        chosen = match chosen {
            _ if s.code == Code::OverLimit => Some(s),
            Some(c) if c.code == Code::OverLimit || c.remaining <= s.remaining => Some(c),
            _ => Some(s),
        };
    }
    let Some(s) = chosen else {
        return Vec::new();
    };
    let (limit, _, _) = s.limit.as_ref().expect("a status with a limit");
    vec![
        (names[0].clone(), limit.to_string()),
        (names[1].clone(), s.remaining.to_string()),
        (
            names[2].clone(),
            s.reset_seconds.unwrap_or_default().to_string(),
        ),
    ]
}

/// Whole seconds, rounded up, of a time in ms (none below 0).
fn ceil_seconds(ms: i64) -> u64 {
    u64::try_from(ms).map_or(0, |ms| ms.div_ceil(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(rpu: u32, name: Option<&str>) -> (u32, Unit, Option<String>) {
        (rpu, Unit::Minute, name.map(str::to_string))
    }

    fn decided(allowed: bool, remaining: u64, reset_after_ms: i64) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining,
            retry_after_ms: if allowed { 0 } else { reset_after_ms },
            reset_after_ms,
        }
    }

    #[test]
    fn hits_as_envoy_sends_them() {
        assert_eq!(hits(0, None), 1);
        assert_eq!(hits(5, None), 5);
        assert_eq!(hits(5, Some(0)), 0);
        assert_eq!(hits(5, Some(7)), 7);
    }

    #[test]
    fn a_status_from_the_modules_decision() {
        let l = limit(10, Some("per_user"));
        let ok = Status::of(l.clone(), false, &decided(true, 7, 36_500));
        assert_eq!(
            ok,
            Status {
                code: Code::Ok,
                limit: Some((10, Unit::Minute, Some("per_user".into()))),
                remaining: 7,
                reset_seconds: Some(37),
                shadow_denied: false,
            }
        );
        let over = Status::of(l.clone(), false, &decided(false, 0, 1));
        assert_eq!(
            (over.code, over.remaining, over.reset_seconds),
            (Code::OverLimit, 0, Some(1))
        );
        let shadow = Status::of(l.clone(), true, &decided(false, 0, 1));
        assert_eq!((shadow.code, shadow.shadow_denied), (Code::Ok, true));
        assert_eq!(Status::unlimited().remaining, 4_294_967_295);
    }

    #[test]
    fn the_overall_code_and_global_shadow_mode() {
        let l = limit(10, None);
        let ok = Status::of(l.clone(), false, &decided(true, 3, 1000));
        let over = Status::of(l.clone(), false, &decided(false, 0, 1000));
        assert_eq!(overall(&[ok.clone(), Status::no_limit()], false), Code::Ok);
        assert_eq!(overall(&[ok.clone(), over.clone()], false), Code::OverLimit);
        assert_eq!(overall(&[ok, over], true), Code::Ok);
    }

    #[test]
    fn the_headers_describe_the_last_refusal_else_the_least_remaining() {
        let names = [
            "RateLimit-Limit".to_string(),
            "RateLimit-Remaining".into(),
            "RateLimit-Reset".into(),
        ];
        let status = |rpu, allowed, remaining, reset| {
            Status::of(limit(rpu, None), false, &decided(allowed, remaining, reset))
        };
        let pairs = |h: Vec<(String, String)>| h.into_iter().map(|(_, v)| v).collect::<Vec<_>>();
        // The least remaining, the first of equals.
        let h = headers(
            &[
                status(10, true, 5, 2000),
                status(20, true, 3, 9000),
                status(30, true, 3, 1000),
            ],
            &names,
        );
        assert_eq!(pairs(h), ["20", "3", "9"]);
        // A refusal wins, the last one.
        let h = headers(
            &[
                status(10, false, 0, 2000),
                status(20, true, 0, 9000),
                status(30, false, 0, 5000),
            ],
            &names,
        );
        assert_eq!(pairs(h), ["30", "0", "5"]);
        assert!(headers(&[Status::no_limit(), Status::unlimited()], &names).is_empty());
        assert_eq!(
            headers(&[status(10, true, 9, 1)], &names)[0].0,
            "RateLimit-Limit"
        );
    }
}
