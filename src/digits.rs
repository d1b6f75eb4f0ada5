//! An integer as Redis writes it: digits only, no sign, no leading zero, no overflow. The one
//! reader of numbers that the argument grammar (`args`) and the load arguments (`config`)
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

    proptest! {
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
