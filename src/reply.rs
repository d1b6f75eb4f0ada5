//! Replies: the five-field admission reply (an array for RESP2 clients, a map with a boolean
//! `allowed` for RESP3 clients), redis-cell's array, RL.INSPECT's map, and errors.
//!
//! Written straight to the reply buffer with the raw API: no reply vectors on the hot path.

use std::ffi::CString;
use std::os::raw::{c_char, c_long};

use redis_module::raw;

use crate::algorithms::{Decision, Span};
use crate::error::Error;
use crate::metrics;

type Ctx = *mut raw::RedisModuleCtx;

/// The field names of the admission reply, in order.
pub const FIELDS: [&str; 5] = [
    "allowed",
    "limit",
    "remaining",
    "retry_after_ms",
    "reset_after_ms",
];

/// Clamps to the i64 range of a RESP integer.
pub fn int(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// Seconds the way redis-cell reports them: the whole milliseconds (rounded down), then up
/// to the next whole second if any millisecond is left over.
fn redis_cell_seconds(span: Span) -> u64 {
    let ms = span.floor_ms();
    ms / 1000 + u64::from(!ms.is_multiple_of(1000))
}

fn resp3(ctx: Ctx) -> bool {
    // SAFETY: ctx is the running command's context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(ctx) };
    flags as u32 & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
}

fn long(ctx: Ctx, n: i64) {
    // SAFETY: as above.
    unsafe {
        raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, n);
    }
}

fn name(ctx: Ctx, s: &str) {
    // SAFETY: as above; the buffer is copied before the call returns.
    unsafe {
        raw::RedisModule_ReplyWithStringBuffer.unwrap()(ctx, s.as_ptr().cast::<c_char>(), s.len());
    }
}

/// A sixth field some commands add to the admission reply.
pub enum Extra<'a> {
    /// RL.LEAKYBUCKET's `delay_ms`.
    Int(i64),
    /// RL.CONCURRENCY.ACQUIRE's `token` (nil when there is none).
    Bytes(Option<&'a [u8]>),
}

/// The admission reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`, plus
/// one more named field for the commands that have it; a map with a boolean `allowed` for
/// RESP3 clients.
///
/// It also records the decision for the command guard, which counts it (`INFO ratelimit`)
/// and publishes a denial as a keyspace event: every admission command replies through here
/// or [`redis_cell`].
pub fn admission(ctx: Ctx, d: &Decision, extra: Option<(&str, Extra)>) {
    metrics::decided(d.allowed);
    let retry = match d.retry_after {
        Some(span) => int(span.ceil_ms()),
        None => -1,
    };
    let values = [
        i64::from(d.allowed),
        int(d.limit),
        int(d.remaining),
        retry,
        int(d.reset_after.ceil_ms()),
    ];
    let len = values.len() + usize::from(extra.is_some());
    let map = resp3(ctx);
    // SAFETY: ctx is the running command's context; buffers are copied before returning.
    unsafe {
        if map {
            raw::RedisModule_ReplyWithMap.unwrap()(ctx, len as c_long);
            name(ctx, FIELDS[0]);
            raw::RedisModule_ReplyWithBool.unwrap()(ctx, i32::from(d.allowed));
        } else {
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, len as c_long);
            long(ctx, values[0]);
        }
        for (field, value) in FIELDS.iter().zip(values).skip(1) {
            if map {
                name(ctx, field);
            }
            long(ctx, value);
        }
        if let Some((field, value)) = extra {
            if map {
                name(ctx, field);
            }
            match value {
                Extra::Int(n) => long(ctx, n),
                Extra::Bytes(Some(bytes)) => {
                    raw::RedisModule_ReplyWithStringBuffer.unwrap()(
                        ctx,
                        bytes.as_ptr().cast::<c_char>(),
                        bytes.len(),
                    );
                }
                Extra::Bytes(None) => {
                    raw::RedisModule_ReplyWithNull.unwrap()(ctx);
                }
            }
        }
    }
}

/// redis-cell's reply: `[limited, limit, remaining, retry_after_s or -1, reset_after_s]`,
/// an array for every protocol, seconds rounded the way redis-cell rounds them. Records the
/// decision like [`admission`].
pub fn redis_cell(ctx: Ctx, d: &Decision) {
    metrics::decided(d.allowed);
    let retry = match d.retry_after {
        Some(span) if !d.allowed => int(redis_cell_seconds(span)),
        _ => -1,
    };
    let values = [
        i64::from(!d.allowed),
        int(d.limit),
        int(d.remaining),
        retry,
        int(redis_cell_seconds(d.reset_after)),
    ];
    // SAFETY: ctx is the running command's context.
    unsafe {
        raw::RedisModule_ReplyWithArray.unwrap()(ctx, values.len() as c_long);
    }
    for value in values {
        long(ctx, value);
    }
}

/// A map from names to integers after an `algorithm` name (RL.INSPECT); a flat array of
/// name, value, ... for RESP2 clients, like HGETALL. An RL.LIMIT key adds `rules`: an array
/// with one such map per rule.
pub fn described(ctx: Ctx, algorithm: &str, fields: &[(&str, i64)], rules: &[Described]) {
    let pairs = fields.len() + 1 + usize::from(!rules.is_empty());
    map_header(ctx, pairs);
    name(ctx, "algorithm");
    name(ctx, algorithm);
    for (field, value) in fields {
        name(ctx, field);
        long(ctx, *value);
    }
    if !rules.is_empty() {
        name(ctx, "rules");
        // SAFETY: ctx is the running command's context.
        unsafe {
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, rules.len() as c_long);
        }
        for (algorithm, fields) in rules {
            described(ctx, algorithm, fields, &[]);
        }
    }
}

/// One rule of an RL.LIMIT key as RL.INSPECT shows it: its algorithm and fields.
pub type Described = (&'static str, Vec<(&'static str, i64)>);

/// A map of `pairs` entries, or a flat array of twice as many for RESP2 clients.
fn map_header(ctx: Ctx, pairs: usize) {
    // SAFETY: ctx is the running command's context.
    unsafe {
        if resp3(ctx) {
            raw::RedisModule_ReplyWithMap.unwrap()(ctx, pairs as c_long);
        } else {
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, (pairs * 2) as c_long);
        }
    }
}

/// An array of strings (RL.POLICY.GET's rule words, RL.POLICY.LIST's names).
pub fn strings<'a>(ctx: Ctx, items: impl ExactSizeIterator<Item = &'a [u8]>) {
    // SAFETY: ctx is the running command's context; buffers are copied before returning.
    unsafe {
        raw::RedisModule_ReplyWithArray.unwrap()(ctx, items.len() as c_long);
        for item in items {
            raw::RedisModule_ReplyWithStringBuffer.unwrap()(
                ctx,
                item.as_ptr().cast::<c_char>(),
                item.len(),
            );
        }
    }
}

pub fn integer(ctx: Ctx, n: i64) {
    long(ctx, n);
}

pub fn null(ctx: Ctx) {
    // SAFETY: ctx is the running command's context.
    unsafe {
        raw::RedisModule_ReplyWithNull.unwrap()(ctx);
    }
}

pub fn ok(ctx: Ctx) {
    // SAFETY: as above; the string is a NUL-terminated literal.
    unsafe {
        raw::RedisModule_ReplyWithSimpleString.unwrap()(ctx, c"OK".as_ptr());
    }
}

/// An error reply. The text comes from [`Error`]'s Display, which never holds client bytes
/// unquoted, so it has no NUL or line break.
pub fn error(ctx: Ctx, e: &Error) {
    let text = CString::new(e.to_string())
        .unwrap_or_else(|_| CString::from(c"ERR ratelimit: unprintable error"));
    // SAFETY: ctx is the running command's context; the text is NUL-terminated.
    unsafe {
        raw::RedisModule_ReplyWithError.unwrap()(ctx, text.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_cell_rounds_seconds_up_from_whole_milliseconds() {
        assert_eq!(redis_cell_seconds(Span::from_us(3_900_000)), 4);
        assert_eq!(redis_cell_seconds(Span::from_us(3_000_000)), 3);
        // Less than a whole millisecond over the second is not rounded up.
        assert_eq!(redis_cell_seconds(Span::from_us(1_000_400)), 1);
        assert_eq!(redis_cell_seconds(Span::from_us(1_001_000)), 2);
        assert_eq!(redis_cell_seconds(Span::ZERO), 0);
    }

    #[test]
    fn int_clamps_to_a_resp_integer() {
        assert_eq!(int(0), 0);
        assert_eq!(int(i64::MAX as u64), i64::MAX);
        assert_eq!(int(i64::MAX as u64 + 1), i64::MAX);
        assert_eq!(int(u64::MAX), i64::MAX);
    }
}
