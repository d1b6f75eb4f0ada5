//! The log: one line per event on stderr, at `LOG_LEVEL` (`warn` by default) and up, as text or,
//! with `LOG_FORMAT=json`, as envoyproxy/ratelimit's JSON lines (`@timestamp`, `@message`,
//! `level`).

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// 0 debug, 1 info, 2 warn, 3 error.
static SETTINGS: OnceLock<(u8, bool)> = OnceLock::new();

/// Sets the level (trace and debug log as debug; fatal and panic as error) and the format.
pub fn init(level: &str, json: bool) {
    let level = match level {
        "trace" | "debug" => 0,
        "info" => 1,
        "warn" | "warning" => 2,
        _ => 3,
    };
    let _ = SETTINGS.set((level, json));
}

fn write(level: u8, name: &str, message: &str) {
    let (min, json) = *SETTINGS.get().unwrap_or(&(2, false));
    if level < min {
        return;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let timestamp = rfc3339(now.as_secs(), now.subsec_nanos());
    if json {
        let line = serde_json::json!({"@timestamp": timestamp, "@message": message, "level": name});
        eprintln!("{line}");
    } else {
        eprintln!("time=\"{timestamp}\" level={name} msg={message:?}");
    }
}

pub fn info(message: &str) {
    write(1, "info", message);
}

pub fn warn(message: &str) {
    write(2, "warning", message);
}

pub fn error(message: &str) {
    write(3, "error", message);
}

/// `2026-11-29T18:52:20.123456789Z` (the civil date from days since the epoch: Howard
/// Hinnant's algorithm).
fn rfc3339(secs: u64, nanos: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}
