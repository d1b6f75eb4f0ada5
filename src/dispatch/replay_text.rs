//! RL.REPLAY's carried argument, `now_us:expire_at_ms:COMMAND:arg2`: written by the
//! dispatcher for every write a client's call propagates ([`ReplayText`]), read back by
//! RL.REPLAY on a replica or from the AOF ([`parse_replay`]).

/// The longest command name and first argument [`ReplayText::write`] writes on the stack;
/// the text is then at most 40 digits, 3 colons and these.
const STACK_WORDS: usize = 85;

/// RL.REPLAY's carried argument, built in one pass: on the stack when it fits (always, but
/// for a client's very long first argument), else on the heap. It lives in its caller's
/// frame and is written in place, from its end back: the numbers go straight into it.
pub struct ReplayText {
    /// The text is `stack[start..]`; the first 20 bytes are room for [`decimal`] to
    /// write the clock reading's digits, right-aligned in 20, ending where the text starts.
    stack: [u8; 20 + 3 + 40 + STACK_WORDS],
    start: usize,
    heap: Vec<u8>,
}

impl ReplayText {
    pub fn new() -> ReplayText {
        ReplayText {
            stack: [0; 20 + 3 + 40 + STACK_WORDS],
            start: 0,
            heap: Vec::new(),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.stack[self.start..]
        } else {
            &self.heap
        }
    }

    /// Writes `now_us:expire_at_ms:command:first_arg`.
    pub fn write(&mut self, now_us: u64, expire_at_ms: u64, command: &[u8], first_arg: &[u8]) {
        if command.len() + first_arg.len() > STACK_WORDS {
            let (mut now, mut expire) = ([0u8; 20], [0u8; 20]);
            let (now_at, expire_at) = (
                decimal(&mut now, now_us),
                decimal(&mut expire, expire_at_ms),
            );
            let (now, expire) = (&now[now_at..], &expire[expire_at..]);
            self.heap = [now, b":", expire, b":", command, b":", first_arg].concat();
            return;
        }
        let text = &mut self.stack;
        let mut at = text.len() - first_arg.len();
        text[at..].copy_from_slice(first_arg);
        at -= 1;
        text[at] = b':';
        at -= command.len();
        text[at..at + command.len()].copy_from_slice(command);
        at -= 1;
        text[at] = b':';
        at = decimal_before(text, at, expire_at_ms);
        at -= 1;
        text[at] = b':';
        self.start = decimal_before(text, at, now_us);
    }
}

/// Writes `n` in decimal into `text`, ending at `end` (at least 20: the text is written
/// from its end back, with room for 20 digits before it); returns where it starts.
fn decimal_before(text: &mut [u8], end: usize, n: u64) -> usize {
    match text[..end].last_chunk_mut::<20>() {
        Some(room) => end - 20 + decimal(room, n),
        None => end,
    }
}

/// `n` in decimal, into the end of `digits`; returns where it starts. Eight digits at a
/// time, without a division per digit: this runs twice on every admitted request, for its
/// clock reading (16 digits) and its expiry (13).
fn decimal(digits: &mut [u8; 20], n: u64) -> usize {
    const EIGHT: u64 = 100_000_000;
    const ASCII: u64 = 0x3030_3030_3030_3030;
    let low = digit_lanes(n % EIGHT);
    digits[12..].copy_from_slice(&(low | ASCII).to_le_bytes());
    if n < EIGHT {
        // At least one digit, the 0 of zero.
        return 12 + leading_zeros(low).min(7);
    }
    let rest = n / EIGHT;
    let middle = digit_lanes(rest % EIGHT);
    digits[4..12].copy_from_slice(&(middle | ASCII).to_le_bytes());
    if rest < EIGHT {
        return 4 + leading_zeros(middle);
    }
    // Below 1845: four digits, the last four lanes.
    let high = digit_lanes(rest / EIGHT);
    digits[..4].copy_from_slice(&(high | ASCII).to_le_bytes()[4..]);
    leading_zeros(high) - 4
}

/// The leading zero digits of [`digit_lanes`]' eight (the first digit is the lowest byte).
fn leading_zeros(lanes: u64) -> usize {
    lanes.trailing_zeros() as usize / 8
}

/// The eight decimal digits of `x` (< 10^8, leading zeros included), one a byte, the first
/// in the lowest byte (first in memory as little-endian bytes). The divisions run in
/// parallel lanes of one u64 (SWAR), each a multiplication and a shift that is exact in its
/// range: two halves of four digits in 32-bit lanes, split into pairs in 16-bit lanes
/// (`/ 100` as `* 10486 >> 20`, exact below 10^4), split into digits in bytes (`/ 10` as
/// `* 103 >> 10`, exact below 100). Nothing carries from one lane into the next, so the
/// wrapping operations never wrap; they only spare the overflow checks.
fn digit_lanes(x: u64) -> u64 {
    let halves = (x / 10_000) | ((x % 10_000) << 32);
    let hundreds = (halves.wrapping_mul(10_486) >> 20) & 0x0000_007F_0000_007F;
    let pairs = hundreds | (halves.wrapping_sub(hundreds.wrapping_mul(100)) << 16);
    let tens = (pairs.wrapping_mul(103) >> 10) & 0x000F_000F_000F_000F;
    tens | (pairs.wrapping_sub(tens.wrapping_mul(10)) << 8)
}

/// What RL.REPLAY's third argument carries.
#[derive(Debug, PartialEq, Eq)]
pub struct Replayed<'a> {
    pub now_us: u64,
    pub expire_at_ms: u64,
    pub command: &'a [u8],
    pub first_arg: &'a [u8],
}

/// Parses what [`ReplayText::write`] wrote (the argument after the command may hold colons).
pub fn parse_replay(text: &[u8]) -> Option<Replayed<'_>> {
    let mut parts = text.splitn(4, |&b| b == b':');
    let number =
        |part: Option<&[u8]>| -> Option<u64> { std::str::from_utf8(part?).ok()?.parse().ok() };
    Some(Replayed {
        now_us: number(parts.next())?,
        expire_at_ms: number(parts.next())?,
        command: parts.next()?,
        first_arg: parts.next()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value below 10^8 (half a second in release), against a decimal counter.
    #[test]
    fn digit_lanes_hold_every_value() {
        let mut counter = [b'0'; 8];
        for x in 0..100_000_000 {
            let ascii = (digit_lanes(x) | 0x3030_3030_3030_3030).to_le_bytes();
            assert_eq!(ascii, counter, "{x}");
            for digit in counter.iter_mut().rev() {
                if *digit < b'9' {
                    *digit += 1;
                    break;
                }
                *digit = b'0';
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn decimal_writes_what_display_writes_for_any(n: u64) {
            let mut digits = [0u8; 20];
            let at = decimal(&mut digits, n);
            let text = n.to_string();
            proptest::prop_assert_eq!(&digits[at..], text.as_bytes());
        }
    }

    /// Every digit count, both sides of each power of ten, and the extremes.
    #[test]
    fn decimal_writes_what_display_writes() {
        let mut cases = vec![0, 1, 9, u64::MAX, u64::MAX - 1, 1_700_000_000_123_456];
        for p in 1..=19 {
            let ten = 10u64.pow(p);
            cases.extend([ten - 1, ten, ten + 1, ten + 10, ten / 10 * 9 + 99]);
        }
        for n in cases {
            let mut digits = [0u8; 20];
            let at = decimal(&mut digits, n);
            assert_eq!(&digits[at..], n.to_string().as_bytes(), "{n}");
        }
    }

    fn write_replay(now_us: u64, expire_at_ms: u64, command: &[u8], arg: &[u8]) -> ReplayText {
        let mut out = ReplayText::new();
        out.write(now_us, expire_at_ms, command, arg);
        out
    }

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_replayed_argument_round_trips() {
        for (now, expire, command, arg) in [
            (0, 0, &b"RL.GCRA"[..], &b"5"[..]),
            (
                1_700_000_000_123_456,
                1_700_000_060_124,
                b"CL.THROTTLE",
                b"a:b:c",
            ),
            (u64::MAX, u64::MAX, b"RL.SLIDINGLOG", b""),
        ] {
            let out = write_replay(now, expire, command, arg);
            assert_eq!(
                out.as_slice(),
                format!("{now}:{expire}:{}:{}", text(command), text(arg)).as_bytes()
            );
            let expected = Replayed {
                now_us: now,
                expire_at_ms: expire,
                command,
                first_arg: arg,
            };
            assert_eq!(parse_replay(out.as_slice()), Some(expected));
        }
        // A long first argument spills to the heap and still round-trips; so does the
        // longest that stays on the stack, with the longest numbers.
        for len in [300, STACK_WORDS - 7, STACK_WORDS - 6] {
            let long = vec![b'x'; len];
            let out = write_replay(u64::MAX, u64::MAX, b"RL.GCRA", &long);
            let max = u64::MAX;
            let expected = [format!("{max}:{max}:RL.GCRA:").as_bytes(), &long].concat();
            assert_eq!(out.as_slice(), expected);
            assert_eq!(out.heap.is_empty(), len + 7 <= STACK_WORDS, "{len}");
            assert_eq!(parse_replay(out.as_slice()).unwrap().first_arg, &long[..]);
        }
        assert_eq!(parse_replay(b"12:13:RL.GCRA"), None);
        assert_eq!(parse_replay(b"x:13:RL.GCRA:5"), None);
        assert_eq!(parse_replay(b"-1:2:RL.GCRA:5"), None);
    }
}
