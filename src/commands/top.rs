//! RL.TOP: the keys denied most often lately (see [`crate::denials`]).

use super::{command, Command, When, NO_KEYS, READ};
use crate::args;
use crate::args::syntax::{integer, name, KeyUse};
use crate::dispatch::{read_clock, Call};
use crate::error::{quote, Error};
use crate::redis::KeyReader;
use crate::response::{Reply, Response, TopEntry};

/// The most entries RL.TOP lists.
pub const MAX_COUNT: u64 = 100_000;
const DEFAULT_COUNT: usize = 10;

pub static RL_TOP: Command = command! {
    name: name!("rl.top"),
    flags: c"readonly",
    acl: READ,
    keys: NO_KEYS,
    when: When::Always,
    replayable: false,
    summary: c"List the keys denied most often lately, with their counts and error bounds, those the caller may read",
    complexity: c"O(S log S) where S is the summary's size (ratelimit.top-size)",
    key: KeyUse::None,
    args: &[integer(c"k", c"how many keys at most, 1 to 100000 (default 10)").after(c"COUNT").optional()],
    handler: rl_top,
};

/// `RL.TOP [COUNT k]`
///
/// The `k` (default 10) keys denied most often in the current and the previous period of
/// `ratelimit.top-period`, most first, each as `[key, count, error]`: the key was denied at
/// most `count` and at least `count - error` times (error 0: exact). Only keys the caller's
/// ACL lets it read are listed; on a server without the ACL functions, none. Not
/// persisted, not replicated: this server's view of its own clients' denials.
pub fn rl_top(call: &Call) -> Result<Response, Error> {
    let mut a = RL_TOP.syntax.read(call.args);
    let position = a.position();
    let count = match a.optional() {
        None => DEFAULT_COUNT,
        Some(word) if word.eq_ignore_ascii_case(b"COUNT") => {
            let k = a.next()?;
            a.finish()?;
            usize::try_from(args::count(k, "COUNT", 1, MAX_COUNT)?).unwrap_or(usize::MAX)
        }
        Some(word) => {
            return Err(Error::UnknownOption {
                position,
                token: quote(word),
                accepted: "COUNT k",
            })
        }
    };
    let entries = crate::denials::entries(read_clock().now_us);
    let reader = KeyReader::caller(call.ctx);
    let listed = entries
        .into_iter()
        .filter(|e| reader.as_ref().is_some_and(|r| r.may_read(&e.key)))
        .take(count)
        .map(|e| TopEntry {
            key: e.key,
            count: e.count,
            error: e.error,
        })
        .collect();
    Ok(Response::reply(Reply::Top(listed)))
}
