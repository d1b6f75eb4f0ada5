//! Renders a [`Reply`] to the client: the five-field admission reply (an array for RESP2
//! clients, a map with a boolean `allowed` for RESP3 clients), redis-cell's array,
//! RL.INSPECT's map, the plain replies, and errors.
//!
//! Written straight to the reply buffer through the room's reply writers: no reply vectors.

use std::ffi::CString;

use super::{int, Admission, Described, Extra, Inspection, Reply};
use crate::error::Error;
use crate::redis::Ctx;
use algorithms::{Decision, Span};

/// The field names of the admission reply, in order.
pub const FIELDS: [&str; 5] = [
    "allowed",
    "limit",
    "remaining",
    "retry_after_ms",
    "reset_after_ms",
];

/// Seconds the way redis-cell reports them: the whole milliseconds (rounded down), then up
/// to the next whole second if any millisecond is left over.
fn redis_cell_seconds(span: Span) -> u64 {
    let ms = span.floor_ms();
    ms / 1000 + u64::from(!ms.is_multiple_of(1000))
}

/// Writes `reply` to the client.
pub fn reply(ctx: Ctx, reply: &Reply) {
    match reply {
        Reply::Admission(a) => admission(ctx, a),
        Reply::RedisCell(a) => redis_cell(ctx, &a.decision),
        Reply::Int(n) => ctx.reply_long(*n),
        Reply::IntPair(a, b) => {
            ctx.reply_array(2);
            ctx.reply_long(*a);
            ctx.reply_long(*b);
        }
        Reply::Nil => ctx.reply_null(),
        Reply::Ok => ctx.reply_ok(),
        Reply::Strings(items) => {
            ctx.reply_array(items.len());
            for item in items {
                ctx.reply_bytes(item);
            }
        }
        Reply::Top(entries) => {
            // `[key, count, error]` per key, for either protocol (like SLOWLOG GET's entries).
            ctx.reply_array(entries.len());
            for e in entries {
                ctx.reply_array(3);
                ctx.reply_bytes(&e.key);
                ctx.reply_long(int(e.count));
                ctx.reply_long(int(e.error));
            }
        }
        Reply::Inspect(Inspection {
            algorithm,
            adaptive,
            fields,
            rules,
        }) => described(ctx, algorithm, *adaptive, fields, rules),
    }
}

fn name(ctx: Ctx, s: &str) {
    ctx.reply_bytes(s.as_bytes());
}

/// The admission reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`, plus
/// one more named field for the commands that have it, then the fields options add
/// (`granted` for ATMOST); a map with a boolean `allowed` for RESP3 clients.
fn admission(ctx: Ctx, a: &Admission) {
    let d = &a.decision;
    let retry = match d.retry_after {
        Some(span) => int(span.ceil_ms()),
        None => -1,
    };
    // The fields after `allowed`, whose value differs by protocol.
    let values = [
        int(d.limit),
        int(d.remaining),
        retry,
        int(d.reset_after.ceil_ms()),
    ];
    let extra = a.extra.name();
    let len = 1
        + values.len()
        + usize::from(extra.is_some())
        + usize::from(a.granted.is_some())
        + usize::from(a.shadow);
    // One loop per protocol, not a protocol test per field.
    let map = ctx.resp3();
    if map {
        ctx.reply_map(len);
        name(ctx, FIELDS[0]);
        ctx.reply_bool(d.allowed);
        for (field, value) in FIELDS[1..].iter().zip(values) {
            name(ctx, field);
            ctx.reply_long(value);
        }
    } else {
        ctx.reply_array(len);
        ctx.reply_long(i64::from(d.allowed));
        for value in values {
            ctx.reply_long(value);
        }
    }
    if let Some(field) = extra {
        if map {
            name(ctx, field);
        }
        match &a.extra {
            Extra::DelayMs(n) | Extra::Rule(n) => ctx.reply_long(*n),
            Extra::Token(Some(token)) => ctx.reply_bytes(token),
            Extra::Token(None) | Extra::None => ctx.reply_null(),
        }
    }
    if let Some(granted) = a.granted {
        if map {
            name(ctx, "granted");
        }
        ctx.reply_long(int(granted));
    }
    // After the command's own fields (and `granted`), only when SHADOW was given: the
    // reply's shape depends on the arguments alone.
    if a.shadow {
        if map {
            name(ctx, SHADOW_DENIED);
        }
        ctx.reply_long(i64::from(a.shadow_denied));
    }
}

/// The field SHADOW adds.
pub const SHADOW_DENIED: &str = "shadow_denied";

/// redis-cell's reply: `[limited, limit, remaining, retry_after_s or -1, reset_after_s]`,
/// an array for every protocol, seconds rounded the way redis-cell rounds them.
fn redis_cell(ctx: Ctx, d: &Decision) {
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
    ctx.reply_array(values.len());
    for value in values {
        ctx.reply_long(value);
    }
}

/// A map from names to integers after an `algorithm` name (RL.INSPECT); a flat array of
/// name, value, ... for RESP2 clients, like HGETALL. An RL.LIMIT key adds `rules`: an array
/// with one such map per rule.
fn described(
    ctx: Ctx,
    algorithm: &str,
    adaptive: Option<&str>,
    fields: &[(&str, i64)],
    rules: &[Described],
) {
    let pairs = fields.len() + 1 + usize::from(adaptive.is_some()) + usize::from(!rules.is_empty());
    ctx.reply_map(pairs);
    name(ctx, "algorithm");
    name(ctx, algorithm);
    if let Some(adaptive) = adaptive {
        name(ctx, "adaptive");
        name(ctx, adaptive);
    }
    for (field, value) in fields {
        name(ctx, field);
        ctx.reply_long(*value);
    }
    if !rules.is_empty() {
        name(ctx, "rules");
        ctx.reply_array(rules.len());
        for (algorithm, fields) in rules {
            described(ctx, algorithm, None, fields, &[]);
        }
    }
}

/// An error reply. The text comes from [`Error`]'s Display, which never holds client bytes
/// unquoted, so it has no NUL or line break.
pub fn error(ctx: Ctx, e: &Error) {
    let text = CString::new(e.to_string())
        .unwrap_or_else(|_| CString::from(c"ERR ratelimit: unprintable error"));
    ctx.reply_error(&text);
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
}
