//! Renders a [`Reply`]: the five-field admission reply (an array for RESP2 clients, a map
//! with a boolean `allowed` for RESP3 clients), redis-cell's array, RL.INSPECT's map, the
//! plain replies, and errors.
//!
//! Written straight to the reply buffer through the room's reply writers: no reply vectors.

use std::ffi::CString;

use crate::algorithms::{int, Decision};
use crate::error::Error;
use crate::redis::Ctx;
use crate::response::{Admission, Described, Extra, Inspection, Reply};

/// The field names of the admission reply, in order.
pub const FIELDS: [&str; 5] = [
    "allowed",
    "limit",
    "remaining",
    "retry_after_ms",
    "reset_after_ms",
];

/// Writes `reply` to the client.
pub fn render(ctx: Ctx, reply: &Reply) {
    match reply {
        Reply::Admission(a) => admission(ctx, a),
        Reply::RedisCell(a) => redis_cell(ctx, &a.decision),
        Reply::Int(n) => ctx.reply_long(*n),
        Reply::Nil => ctx.reply_null(),
        Reply::Ok => ctx.reply_ok(),
        Reply::Strings(items) => {
            ctx.reply_array(items.len());
            for item in items {
                ctx.reply_bytes(item);
            }
        }
        Reply::Inspect(Inspection {
            algorithm,
            fields,
            rules,
        }) => described(ctx, algorithm, fields, rules),
    }
}

fn name(ctx: Ctx, s: &str) {
    ctx.reply_bytes(s.as_bytes());
}

/// The admission reply: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`, plus
/// one more named field for the commands that have it; a map with a boolean `allowed` for
/// RESP3 clients.
fn admission(ctx: Ctx, a: &Admission) {
    let d = &a.decision;
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
    let extra = a.extra.name();
    let len = values.len() + usize::from(extra.is_some());
    let map = ctx.resp3();
    if map {
        ctx.reply_map(len);
        name(ctx, FIELDS[0]);
        ctx.reply_bool(d.allowed);
    } else {
        ctx.reply_array(len);
        ctx.reply_long(values[0]);
    }
    for (field, value) in FIELDS.iter().zip(values).skip(1) {
        if map {
            name(ctx, field);
        }
        ctx.reply_long(value);
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
}

/// redis-cell's reply: `[limited, limit, remaining, retry_after_s or -1, reset_after_s]`,
/// an array for every protocol, seconds rounded the way redis-cell rounds them.
fn redis_cell(ctx: Ctx, d: &Decision) {
    let retry = match d.retry_after {
        Some(span) if !d.allowed => int(span.redis_cell_seconds()),
        _ => -1,
    };
    let values = [
        i64::from(!d.allowed),
        int(d.limit),
        int(d.remaining),
        retry,
        int(d.reset_after.redis_cell_seconds()),
    ];
    ctx.reply_array(values.len());
    for value in values {
        ctx.reply_long(value);
    }
}

/// A map from names to integers after an `algorithm` name (RL.INSPECT); a flat array of
/// name, value, ... for RESP2 clients, like HGETALL. An RL.LIMIT key adds `rules`: an array
/// with one such map per rule.
fn described(ctx: Ctx, algorithm: &str, fields: &[(&str, i64)], rules: &[Described]) {
    let pairs = fields.len() + 1 + usize::from(!rules.is_empty());
    ctx.reply_map(pairs);
    name(ctx, "algorithm");
    name(ctx, algorithm);
    for (field, value) in fields {
        name(ctx, field);
        ctx.reply_long(*value);
    }
    if !rules.is_empty() {
        name(ctx, "rules");
        ctx.reply_array(rules.len());
        for (algorithm, fields) in rules {
            described(ctx, algorithm, fields, &[]);
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
