//! A cursor over a call's arguments that keeps the position (mini-redis's `Parse` is the
//! model): a command reads its arguments in order, and an error names an argument by its
//! number in the call (the command's name is 0, the key 1) without anyone passing offsets.

use super::syntax::Syntax;
use super::{parse_options, Grammar, Options};
use crate::error::Error;

/// A call's arguments, read in order.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    words: &'a [&'a [u8]],
    /// The number of the next argument to read (at most the number of words).
    at: usize,
    /// The syntax a missing or extra argument's error shows (`None`: words of no command).
    syntax: Option<&'static Syntax>,
}

impl<'a> Cursor<'a> {
    /// The arguments of a call of the command `syntax` describes (`words[0]` its name), from
    /// argument `at`.
    pub(super) fn new(words: &'a [&'a [u8]], at: usize, syntax: &'static Syntax) -> Cursor<'a> {
        Cursor {
            words,
            at: at.min(words.len()),
            syntax: Some(syntax),
        }
    }

    /// Words that belong to no call (a saved policy's rules), from the first: an error here
    /// is never shown, so a missing word is an error that names no syntax.
    pub fn over(words: &'a [&'a [u8]]) -> Cursor<'a> {
        Cursor {
            words,
            at: 0,
            syntax: None,
        }
    }

    /// The number of the next argument in the call.
    #[inline]
    pub fn position(&self) -> usize {
        self.at
    }

    /// How many arguments are left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.words.len().saturating_sub(self.at)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next argument; the arity error when there is none.
    #[inline]
    pub fn next(&mut self) -> Result<&'a [u8], Error> {
        match self.words.get(self.at) {
            Some(word) => {
                self.at += 1;
                Ok(word)
            }
            None => Err(arity(self.syntax)),
        }
    }

    /// The next `N` arguments (where the call holds them: nothing is copied); the arity
    /// error when fewer are left.
    #[inline]
    pub fn next_n<const N: usize>(&mut self) -> Result<&'a [&'a [u8]; N], Error> {
        match self
            .words
            .get(self.at..)
            .and_then(|rest| rest.first_chunk::<N>())
        {
            Some(words) => {
                self.at += N;
                Ok(words)
            }
            None => Err(arity(self.syntax)),
        }
    }

    /// The next argument if there is one.
    #[inline]
    pub fn optional(&mut self) -> Option<&'a [u8]> {
        let word = self.words.get(self.at)?;
        self.at += 1;
        Some(word)
    }

    /// The argument `ahead` places after the next one (0: the next), left unread.
    #[inline]
    pub fn peek(&self, ahead: usize) -> Option<&'a [u8]> {
        self.words.get(self.at.checked_add(ahead)?).copied()
    }

    /// The next `n` arguments, if that many are left (else nothing is read).
    pub fn take(&mut self, n: usize) -> Option<&'a [&'a [u8]]> {
        let end = self.at.checked_add(n)?;
        let words = self.words.get(self.at..end)?;
        self.at = end;
        Some(words)
    }

    /// Every argument left.
    #[inline]
    pub fn rest(&mut self) -> &'a [&'a [u8]] {
        let rest = self.words.get(self.at..).unwrap_or_default();
        self.at = self.words.len();
        rest
    }

    /// Nothing is left; the arity error otherwise.
    pub fn finish(&self) -> Result<(), Error> {
        match self.is_empty() {
            true => Ok(()),
            false => Err(self.arity()),
        }
    }

    /// The error for a call with too few or too many arguments, naming the syntax.
    pub fn arity(&self) -> Error {
        arity(self.syntax)
    }

    /// The rest of the arguments as the options every admission command takes,
    /// `[COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]`, in any order,
    /// case-insensitive.
    #[inline(always)]
    pub fn options(&mut self) -> Result<Options, Error> {
        let at = self.at;
        parse_options(self.rest(), at, &Grammar::ADMISSION, |_, _| Ok(())).map(|(opts, _)| opts)
    }

    /// The rest of the arguments as the options of `grammar`: the shared ones it takes and
    /// the command's own. `value(i, bytes)` gets the value of the command's own option
    /// `grammar.valued[i]` as it is read, and may refuse it (the error is the call's). Returns
    /// the shared options and the mask of the command's flags given (bit `i`: `flags[i]`).
    #[inline(always)]
    pub fn options_by(
        &mut self,
        grammar: &Grammar,
        value: impl FnMut(usize, &'a [u8]) -> Result<(), Error>,
    ) -> Result<(Options, u32), Error> {
        let at = self.at;
        parse_options(self.rest(), at, grammar, value)
    }
}

/// The error for a call with too few or too many arguments, naming `syntax`. Out of line,
/// and given the syntax alone, so that a cursor on the path of every request stays in
/// registers.
#[cold]
#[inline(never)]
fn arity(syntax: Option<&'static Syntax>) -> Error {
    match syntax {
        Some(syntax) => syntax.arity(),
        // Words of no call were counted before they were read: a bug.
        None => Error::Panic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ACCEPTED_OPTIONS;

    #[test]
    fn a_cursor_reads_in_order_and_keeps_the_position() {
        let words: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
        let mut a = Cursor::over(&words);
        assert_eq!(a.next(), Ok(&b"a"[..]));
        assert_eq!(a.position(), 1);
        assert_eq!(a.next_n::<2>(), Ok(&[&b"b"[..], b"c"]));
        assert_eq!(a.peek(0), Some(&b"d"[..]));
        assert_eq!(a.peek(1), Some(&b"e"[..]));
        assert_eq!(a.peek(2), None);
        assert_eq!(a.take(3), None);
        assert_eq!(a.position(), 3, "a failed take reads nothing");
        assert_eq!(a.next_n::<3>(), Err(Error::Panic));
        assert_eq!(a.take(1), Some(&[&b"d"[..]][..]));
        assert_eq!(a.finish(), Err(Error::Panic));
        assert_eq!(a.optional(), Some(&b"e"[..]));
        assert_eq!(a.optional(), None);
        assert_eq!(a.finish(), Ok(()));
        assert!(a.rest().is_empty());
        assert_eq!(a.next(), Err(Error::Panic));
        assert_eq!((a.position(), a.remaining()), (5, 0));
    }

    #[test]
    fn options_name_their_position_in_the_call() {
        let words: [&[u8]; 4] = [b"x", b"DRYRUN", b"FAST", b"COST"];
        let mut a = Cursor::over(&words);
        a.next().unwrap();
        assert_eq!(
            a.options(),
            Err(Error::UnknownOption {
                position: 2,
                token: "FAST".into(),
                accepted: ACCEPTED_OPTIONS
            })
        );
        assert!(a.is_empty());
    }
}
