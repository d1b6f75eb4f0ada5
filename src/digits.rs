//! An integer as Redis writes it: digits only, no sign, no leading zero, no overflow; and a
//! signed one as Redis reads a string's integer (INCRBY's). The one reader of numbers that the
//! argument grammar (`args`), the load arguments (`config`) and RL.COUNTER's stored values
//! share; a leaf.

/// Only ASCII digits, at most 20 of them, no leading zero (`05` is refused, as Redis refuses
/// it: docs/commands.md, Arguments), no overflow.
#[inline]
pub fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 || (bytes.len() > 1 && bytes[0] == b'0') {
        return None;
    }
    if bytes.len() == 20 {
        return twenty_digits(bytes);
    }
    // At most 19 digits: below 10^19 < u64::MAX, so nothing can overflow, and the wrapping
    // operations only spare the checks (this runs for every count of every request).
    let mut n = 0u64;
    for &b in bytes {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n = n.wrapping_mul(10).wrapping_add(u64::from(digit));
    }
    Some(n)
}

/// A signed 64-bit integer as Redis reads one (`string2ll`, what INCRBY takes from a string
/// and from its argument): [`digits`], or `-` and digits that are not 0, from `i64::MIN` to
/// `i64::MAX`. No `+`, no spaces, no leading zero, no `-0`.
#[inline]
pub fn signed(bytes: &[u8]) -> Option<i64> {
    match bytes.split_first() {
        Some((b'-', magnitude)) => match digits(magnitude)? {
            0 => None,
            // 2^63 is `i64::MIN`'s magnitude, which is no `i64`: it wraps to itself.
            n if n <= i64::MIN.unsigned_abs() => Some((n as i64).wrapping_neg()),
            _ => None,
        },
        _ => digits(bytes).and_then(|n| i64::try_from(n).ok()),
    }
}

/// `n` in decimal as Redis writes it, into `buf` (20 bytes hold any i64): what [`signed`]
/// reads back.
pub fn decimal(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    let mut magnitude = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

/// [`digits`] of 20 digits, which may overflow: out of line, so that the common path stays
/// small enough to inline.
#[cold]
#[inline(never)]
fn twenty_digits(bytes: &[u8]) -> Option<u64> {
    bytes.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn digits_at_the_edges_of_u64() {
        assert_eq!(
            digits(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(digits(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(digits(b"18446744073709551616"), None);
        assert_eq!(digits(b"99999999999999999999"), None);
        assert_eq!(digits(b"100000000000000000000"), None);
        assert_eq!(digits(b"0"), Some(0));
        assert_eq!(digits(b"1:"), None);
        assert_eq!(digits(b"/"), None);
    }

    #[test]
    fn signed_reads_what_incrby_reads() {
        let cases: [(&[u8], Option<i64>); 16] = [
            (b"0", Some(0)),
            (b"-1", Some(-1)),
            (b"42", Some(42)),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"-9223372036854775809", None),
            (b"-0", None),
            (b"-", None),
            (b"", None),
            (b"+1", None),
            (b"01", None),
            (b"-01", None),
            (b" 1", None),
            (b"1.0", None),
            (b"--1", None),
        ];
        for (text, expected) in cases {
            assert_eq!(
                signed(text),
                expected,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn decimal_writes_every_i64_as_redis_does() {
        for n in [0, 1, -1, 9, 10, -10, 1_000_000_000_000, i64::MAX, i64::MIN] {
            let mut buf = [0u8; 20];
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes(), "{n}");
        }
    }

    proptest! {
        /// Every i64 written as Redis writes it reads back; what the standard parser
        /// refuses, or reads from a text Redis would not write, is refused.
        #[test]
        fn signed_agrees_with_the_standard_parser(
            bytes in proptest::collection::vec(
                prop_oneof![9 => b'0'..=b'9', 1 => Just(b'-'), 1 => any::<u8>()], 0..22),
        ) {
            let expected = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .filter(|n| n.to_string().as_bytes() == bytes.as_slice());
            prop_assert_eq!(signed(&bytes), expected);
        }

        #[test]
        fn any_i64_round_trips(n: i64) {
            prop_assert_eq!(signed(n.to_string().as_bytes()), Some(n));
            let (mut buf, text) = ([0u8; 20], n.to_string());
            prop_assert_eq!(decimal(n, &mut buf), text.as_bytes());
        }

        /// Digits only, no leading zero, no overflow: what the standard parser reads of
        /// plain digits, on every length up to 21 (19 and fewer take the unchecked path).
        #[test]
        fn digits_agree_with_the_standard_parser(
            bytes in proptest::collection::vec(
                prop_oneof![9 => b'0'..=b'9', 1 => any::<u8>()], 0..22),
        ) {
            let plain = bytes.iter().all(u8::is_ascii_digit)
                && !(bytes.len() > 1 && bytes[0] == b'0');
            let expected = match plain {
                true => std::str::from_utf8(&bytes).ok().and_then(|t| t.parse::<u64>().ok()),
                false => None,
            };
            prop_assert_eq!(digits(&bytes), expected);
        }

        #[test]
        fn any_u64_round_trips(n: u64) {
            prop_assert_eq!(digits(n.to_string().as_bytes()), Some(n));
        }
    }
}
