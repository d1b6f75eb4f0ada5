//! Penalties: the `BLOCK duration` option of every admission command.
//!
//! A request that the algorithm denies can block the key for a while: every request is then
//! refused until the block ends, whatever the algorithm would allow (the brute-force login:
//! five failed attempts a minute, then locked out for fifteen minutes). The rules:
//!
//! - a block starts when the algorithm denies a request that writes (not DRYRUN, COST > 0)
//!   and could fit the limit (a request above the limit can never be admitted: it is the
//!   caller's mistake, not an attempt to count), and `BLOCK` was given;
//! - it lasts `duration` from that request;
//! - requests during a block are refused with `retry_after` = the time left and
//!   `remaining` = 0, and neither extend the block nor change anything else, so that a block
//!   ends on time and what was refused writes nothing;
//! - the key stays (its TTL covers the block) until the block and the algorithm's state are
//!   both over.

use super::{Decision, Span};

/// Refuses `decision` while the key is blocked until `until_us`; a no-op once it is over.
pub fn apply(decision: &mut Decision, until_us: u64, now_us: u64) {
    if until_us <= now_us {
        return;
    }
    let left = Span::from_us(until_us - now_us);
    decision.allowed = false;
    decision.remaining = 0;
    decision.retry_after = Some(left);
    decision.delay = None;
    if left.ceil_us() > decision.reset_after.ceil_us() {
        decision.reset_after = left;
    }
}

/// When a block starts by this request, the instant it ends.
pub fn starts(
    decision: &Decision,
    cost: u64,
    write: bool,
    block_ms: Option<u64>,
    now_us: u64,
) -> Option<u64> {
    let block_ms = block_ms?;
    let fits = decision.retry_after.is_some();
    (!decision.allowed && write && cost > 0 && fits)
        .then(|| now_us.saturating_add(block_ms.saturating_mul(1000)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_ms: Option<u64>, reset_ms: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 5,
            remaining: 0,
            retry_after: retry_ms.map(|ms| Span::from_us(ms * 1000)),
            reset_after: Span::from_us(reset_ms * 1000),
            delay: None,
        }
    }

    #[test]
    fn a_block_starts_on_a_counted_denial_only() {
        let d = denied(Some(1000), 60_000);
        assert_eq!(
            starts(&d, 1, true, Some(900_000), 10),
            Some(10 + 900_000_000)
        );
        assert_eq!(starts(&d, 1, true, None, 10), None);
        assert_eq!(
            starts(&d, 1, false, Some(900_000), 10),
            None,
            "DRYRUN never blocks"
        );
        assert_eq!(
            starts(&d, 0, true, Some(900_000), 10),
            None,
            "COST 0 never blocks"
        );
        let never = denied(None, 60_000);
        assert_eq!(
            starts(&never, 9, true, Some(900_000), 10),
            None,
            "above the limit"
        );
        let mut admitted = denied(Some(0), 1000);
        admitted.allowed = true;
        assert_eq!(starts(&admitted, 1, true, Some(900_000), 10), None);
    }

    #[test]
    fn a_block_refuses_until_it_ends() {
        let mut d = Decision {
            allowed: true,
            remaining: 4,
            delay: Some(Span::ZERO),
            ..denied(Some(0), 1000)
        };
        apply(&mut d, 5_000_000, 2_000_000);
        assert!(!d.allowed);
        assert_eq!((d.remaining, d.delay), (0, None));
        assert_eq!(d.retry_after.unwrap().ceil_ms(), 3000);
        assert_eq!(
            d.reset_after.ceil_ms(),
            3000,
            "the key lives as long as the block"
        );
        let mut after = denied(Some(0), 1000);
        after.allowed = true;
        let before = after;
        apply(&mut after, 5_000_000, 5_000_000);
        assert_eq!(after, before, "over at its end");
    }
}
