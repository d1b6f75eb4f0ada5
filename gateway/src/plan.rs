//! One request, from its descriptors to the module calls it takes and back to the answer: which
//! rule each descriptor gets (none, unlimited, a rule of the files, or the limit Envoy sent), the
//! call that decides it (one per descriptor with a rule, an admission command of the rule's
//! algorithm on the descriptor's key), and, once the replies are in, the statuses, the overall
//! code, the refunds that give a refused request's units back, and the counters.
//!
//! Pure: the server sends the calls (pipelined per node) and the refunds, and hands the replies
//! back here.

use crate::decide::{self, Code, Decision, Status};
use crate::rules::{
    cache_key, drop_replaced, override_stats_key, Algorithm, Found, LocalBudget, Rules, Unit,
};

/// A request as Envoy sends it (`RateLimitRequest`), whichever way it came (gRPC, `/json`, the
/// HTTP check).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
    /// The request's `hits_addend` (0: one).
    pub hits_addend: u32,
}

/// One of a request's descriptors (`RateLimitDescriptor`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Its entries, (key, value), in order.
    pub entries: Vec<(String, String)>,
    /// The limit Envoy sent in place of the files' rule: requests per unit, and the unit as the
    /// API numbers it (`RateLimitUnit`: 1 second ... 6 year).
    pub limit: Option<(u32, i32)>,
    /// Its own `hits_addend`, when sent (0 too).
    pub hits_addend: Option<u64>,
}

/// A request the service refuses to decide, with envoyproxy/ratelimit's texts (gRPC UNKNOWN,
/// `/json` 400).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    EmptyDomain,
    NoDescriptors,
    /// No rules file was ever loaded.
    NoRules,
    /// A limit Envoy sent with a unit the API does not define (UNKNOWN, 0, or above YEAR).
    BadUnit(i32),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::EmptyDomain => f.write_str("rate limit domain must not be empty"),
            RequestError::NoDescriptors => {
                f.write_str("rate limit descriptor list must not be empty")
            }
            RequestError::NoRules => f.write_str("no rate limit configuration loaded"),
            RequestError::BadUnit(unit) => write!(
                f,
                "rate limit override has unit {unit}: expected 1 (SECOND) to 6 (YEAR)"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

/// The rule one descriptor is decided by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub requests_per_unit: u32,
    pub unit: Unit,
    /// `name:`, shown in the status's limit.
    pub name: Option<String>,
    pub algorithm: Algorithm,
    pub burst: Option<u32>,
    /// `shadow_mode:` on its node: refused is answered OK (and counted).
    pub shadow_mode: bool,
    /// `local_budget:`: its units taken a batch at a time (`crate::budget`).
    pub local_budget: Option<LocalBudget>,
    /// The name its counters are kept under.
    pub stats_key: String,
}

/// What a descriptor takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No rule (or one another rule `replaces`): OK, no call.
    NoLimit,
    /// An unlimited rule: OK, no call, nothing counted.
    Unlimited,
    /// `requests_per_unit: 0`: every request refused, no call (the module takes no limit of 0).
    Blocked { rule: Rule, hits: u64 },
    /// One module call on `key`.
    Call { rule: Rule, key: String, hits: u64 },
}

/// The most units one call may take (the module's COST bound); any more is refused anyway, the
/// largest limit being `u32::MAX`.
const MAX_COST: u64 = 1_000_000_000_000;

/// The steps of a request's descriptors, in order; `prefix` is `CACHE_KEY_PREFIX`. `rules` is
/// none when no file was ever loaded.
pub fn plan(
    rules: Option<&Rules>,
    request: &Request,
    prefix: &str,
) -> Result<Vec<Step>, RequestError> {
    if request.domain.is_empty() {
        return Err(RequestError::EmptyDomain);
    }
    if request.descriptors.is_empty() {
        return Err(RequestError::NoDescriptors);
    }
    let rules = rules.ok_or(RequestError::NoRules)?;
    let Some(domain) = rules.domain(&request.domain) else {
        return Ok(vec![Step::NoLimit; request.descriptors.len()]);
    };
    let entries: Vec<Vec<(&str, &str)>> = request
        .descriptors
        .iter()
        .map(|d| {
            d.entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect()
        })
        .collect();
    let mut found: Vec<Option<Found<'_>>> = entries.iter().map(|e| domain.find(e)).collect();
    drop_replaced(&mut found);
    let mut steps = Vec::with_capacity(found.len());
    for ((descriptor, entries), found) in request.descriptors.iter().zip(&entries).zip(found) {
        let hits = decide::hits(request.hits_addend, descriptor.hits_addend).min(MAX_COST);
        let (rule, key) = if let Some((requests_per_unit, unit)) = descriptor.limit {
            // Envoy's own limit wins over the files' whenever the domain is known: a fixed window
            // counted under the descriptor's entries, as that service counts it.
            let unit = api_unit(unit).ok_or(RequestError::BadUnit(unit))?;
            let rule = Rule {
                requests_per_unit,
                unit,
                name: None,
                algorithm: Algorithm::FixedWindow,
                burst: None,
                shadow_mode: false,
                local_budget: None,
                stats_key: override_stats_key(&request.domain, entries),
            };
            // A limit Envoy sent: the descriptor's own entries, no wildcard shares them.
            let key = cache_key(prefix, &request.domain, entries, &[], &key_tail(&rule));
            (rule, key)
        } else {
            let Some(found) = found else {
                steps.push(Step::NoLimit);
                continue;
            };
            let (limit, unit) = match found.limit.unit {
                Some(unit) if !found.limit.unlimited => (found.limit, unit),
                _ => {
                    steps.push(Step::Unlimited);
                    continue;
                }
            };
            let rule = Rule {
                requests_per_unit: limit.requests_per_unit,
                unit,
                name: limit.name.clone(),
                algorithm: limit.algorithm,
                burst: limit.burst,
                shadow_mode: found.node.shadow_mode,
                local_budget: limit.local_budget,
                stats_key: found.stats_key.clone(),
            };
            let key = found.cache_key(prefix, &request.domain, entries, &key_tail(&rule));
            (rule, key)
        };
        steps.push(if rule.requests_per_unit == 0 {
            Step::Blocked { rule, hits }
        } else {
            Step::Call { rule, key, hits }
        });
    }
    Ok(steps)
}

/// The API's unit number (`RateLimitUnit`), which has no week.
fn api_unit(number: i32) -> Option<Unit> {
    Some(match number {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        _ => return None,
    })
}

/// What ends a rule's key: its unit, and its algorithm unless a fixed window, so that a rule
/// Envoy sends and a rule of the files, or two units, never share a key (envoyproxy/ratelimit's
/// keys end with the window's start; the module keeps the window in the key instead).
fn key_tail(rule: &Rule) -> String {
    let unit = rule.unit.name().to_ascii_lowercase();
    match rule.algorithm {
        Algorithm::FixedWindow => unit,
        other => format!("{unit}_{}", other.name()),
    }
}

impl Rule {
    /// The module call that decides `hits` units of this rule on `key`: the rule's algorithm
    /// with the unit as its period (`requests_per_unit` per unit; `burst:`, or else the rate, as
    /// GCRA's burst and the buckets' capacity), and `COST hits`.
    pub fn command(&self, key: &str, hits: u64) -> Vec<String> {
        self.command_with(key, "COST", hits)
    }

    /// The call that fills a local budget: the rule's command with `ATMOST units` (as many as
    /// the key allows now, up to `units`; the reply's `granted` says how many).
    pub fn refill(&self, key: &str, units: u64) -> Vec<String> {
        self.command_with(key, "ATMOST", units)
    }

    fn command_with(&self, key: &str, option: &str, units: u64) -> Vec<String> {
        let rate = self.requests_per_unit.to_string();
        let burst = self.burst.unwrap_or(self.requests_per_unit).to_string();
        let period = format!("{}s", self.unit.seconds());
        let (name, params): (&str, [&str; 3]) = match self.algorithm {
            Algorithm::FixedWindow => ("RL.FIXEDWINDOW", [&rate, &period, ""]),
            Algorithm::SlidingWindow => ("RL.SLIDINGWINDOW", [&rate, &period, ""]),
            Algorithm::SlidingLog => ("RL.SLIDINGLOG", [&rate, &period, ""]),
            Algorithm::Gcra => ("RL.GCRA", [&burst, &rate, &period]),
            Algorithm::TokenBucket => ("RL.TOKENBUCKET", [&burst, &rate, &period]),
            Algorithm::LeakyBucket => ("RL.LEAKYBUCKET", [&burst, &rate, &period]),
        };
        let mut args = vec![name.to_string(), key.to_string()];
        args.extend(
            params
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| p.to_string()),
        );
        args.extend([option.to_string(), units.to_string()]);
        args
    }

    /// The window a client sees for RateLimit-Policy's `w`, in seconds: the unit for the
    /// windows and logs; for GCRA and the buckets the time a whole burst takes to come back, so
    /// that `q`/`w` is the rate.
    pub fn window_seconds(&self) -> u64 {
        let unit = self.unit.seconds();
        match (self.algorithm.takes_burst(), self.burst) {
            (true, Some(burst)) => {
                (u64::from(burst) * unit).div_ceil(u64::from(self.requests_per_unit.max(1)))
            }
            _ => unit,
        }
    }
}

/// The replies that came back: per step, the module's decision (none for the steps that make no
/// call).
pub type Replies = [Option<Decision>];

/// The answer, before any refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub statuses: Vec<Status>,
    pub overall: Code,
    /// Whether the request was refused (its overall code, global shadow mode aside): then every
    /// unit its admitted descriptors took is given back (`refunds`).
    pub refused: bool,
}

/// The statuses and the overall code of `steps` from `replies`; `shadow_mode` is the service's
/// `SHADOW_MODE` (answer OK, the statuses as decided, and keep what was taken).
pub fn answer(steps: &[Step], replies: &Replies, shadow_mode: bool) -> Answer {
    let statuses: Vec<Status> = steps
        .iter()
        .zip(replies)
        .map(|(step, reply)| match (step, reply) {
            (Step::NoLimit, _) => Status::no_limit(),
            (Step::Unlimited, _) => Status::unlimited(),
            (Step::Blocked { rule, .. }, _) => blocked_status(rule),
            (Step::Call { rule, .. }, Some(d)) => status(rule, d),
            (Step::Call { .. }, None) => Status::no_limit(),
        })
        .collect();
    let refused = decide::overall(&statuses, false) == Code::OverLimit;
    Answer {
        overall: decide::overall(&statuses, shadow_mode),
        refused: refused && !shadow_mode,
        statuses,
    }
}

fn status(rule: &Rule, d: &Decision) -> Status {
    let limit = (rule.requests_per_unit, rule.unit, rule.name.clone());
    Status::of(limit, rule.shadow_mode, d)
}

/// A rule of 0 requests: refused (OK in shadow mode), nothing remains, no window to wait for.
fn blocked_status(rule: &Rule) -> Status {
    Status {
        code: if rule.shadow_mode {
            Code::Ok
        } else {
            Code::OverLimit
        },
        limit: Some((0, rule.unit, rule.name.clone())),
        remaining: 0,
        reset_seconds: Some(0),
        shadow_denied: rule.shadow_mode,
    }
}

/// The calls that give a refused request's units back: `RL.REFUND key units` for each
/// descriptor the module admitted with units taken, with the step's index.
pub fn refunds(steps: &[Step], replies: &Replies) -> Vec<(usize, Vec<String>)> {
    steps
        .iter()
        .zip(replies)
        .enumerate()
        .filter_map(|(i, (step, reply))| match (step, reply) {
            (Step::Call { key, hits, .. }, Some(d)) if d.allowed && *hits > 0 => Some((
                i,
                vec!["RL.REFUND".to_string(), key.clone(), hits.to_string()],
            )),
            _ => None,
        })
        .collect()
}

/// A status after its units were given back (`given`, RL.REFUND's reply): what remains grows
/// by them, never above the limit.
pub fn refunded(status: &mut Status, given: u64) {
    if let Some((limit, _, _)) = &status.limit {
        let remaining = u64::from(status.remaining).saturating_add(given);
        status.remaining = u32::try_from(remaining.min(u64::from(*limit))).unwrap_or(u32::MAX);
    }
}

/// The IETF draft-11 fields of a request's answer (`RATELIMIT_HEADERS=draft-11`): every
/// descriptor with a rule in `RateLimit-Policy` (named by its `name:`, else its stat name; `q`
/// the module's limit, `w` the window or the time a whole burst takes to come back) and
/// `RateLimit` (`r` what remains; `t` on a refusal the seconds until it would pass, when
/// admitted the fixed window's end, left out for the other algorithms, whose units come back
/// before their reset), and on a refused request `Retry-After`, the longest of its refusals'
/// waits (none when one can never pass). None when no descriptor has a rule.
pub fn draft11_headers(
    steps: &[Step],
    replies: &Replies,
    statuses: &[Status],
) -> Vec<(String, String)> {
    let (mut policies, mut states) = (Vec::new(), Vec::new());
    let mut retry: Option<Option<u64>> = None;
    for ((step, reply), status) in steps.iter().zip(replies).zip(statuses) {
        let (Step::Call { rule, .. }, Some(d)) = (step, reply) else {
            continue;
        };
        let name = sf_string(rule.name.as_deref().unwrap_or(&rule.stats_key));
        policies.push(format!("{name};q={};w={}", d.limit, rule.window_seconds()));
        let t = if !d.allowed {
            u64::try_from(d.retry_after_ms)
                .ok()
                .map(|ms| ms.div_ceil(1000))
        } else if rule.algorithm == Algorithm::FixedWindow {
            status.reset_seconds
        } else {
            None
        };
        if !d.allowed && status.code == Code::OverLimit {
            retry = Some(match (retry, t) {
                (Some(None), _) | (_, None) => None,
                (Some(Some(a)), Some(b)) => Some(a.max(b)),
                (None, Some(b)) => Some(b),
            });
        }
        states.push(match t {
            Some(t) => format!("{name};r={};t={t}", status.remaining),
            None => format!("{name};r={}", status.remaining),
        });
    }
    if policies.is_empty() {
        return Vec::new();
    }
    let mut headers = vec![
        ("RateLimit-Policy".to_string(), policies.join(", ")),
        ("RateLimit".to_string(), states.join(", ")),
    ];
    if let Some(Some(seconds)) = retry {
        headers.push(("Retry-After".to_string(), seconds.to_string()));
    }
    headers
}

/// A Structured Field String: quoted, `\` and `"` escaped (the names are printable ASCII: a
/// rule's name or stat name from the files, whose other characters are dropped).
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The counters of one rule's decision, as envoyproxy/ratelimit counts them
/// (`ratelimit.service.rate_limit.<stats_key>.<counter>`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
}

/// What a step adds to its rule's counters (none for the steps without a rule: unlimited rules
/// are not counted there either). `near_ratio` is `NEAR_LIMIT_RATIO`: a request counts as near
/// the limit for the units it takes past `floor(limit × ratio)` (in f32, as there). The module's
/// reply stands for the window's counter: the units taken before are `limit − remaining` (of
/// the reply when refused, as nothing was taken; else less the units this call took).
pub fn counts(step: &Step, reply: Option<&Decision>, near_ratio: f32) -> Option<Counts> {
    let (rule, hits, before, limit, refused) = match (step, reply) {
        (Step::Blocked { rule, hits }, _) => (rule, *hits, 0, 0, true),
        (Step::Call { rule, hits, .. }, Some(d)) => {
            let used = d.limit.saturating_sub(d.remaining);
            let before = if d.allowed {
                used.saturating_sub(*hits)
            } else {
                used
            };
            (rule, *hits, before, d.limit, !d.allowed)
        }
        _ => return None,
    };
    // As envoyproxy/ratelimit: f32 arithmetic, floored.
    let near = (limit as f32 * near_ratio).floor() as u64;
    let after = before.saturating_add(hits);
    let mut c = Counts {
        total_hits: hits,
        ..Counts::default()
    };
    if refused {
        if before >= limit {
            c.over_limit = hits;
        } else {
            c.over_limit = after - limit;
            c.near_limit = limit - near.max(before);
        }
        if rule.shadow_mode {
            c.shadow_mode = if before >= limit { hits } else { after - limit };
        }
    } else {
        c.within_limit = hits;
        if after > near {
            c.near_limit = if before >= near { hits } else { after - near };
        }
    }
    Some(c)
}

/// The Prometheus labels of a stat name, as envoyproxy/ratelimit's built-in mapping gives them
/// (`ratelimit_service_rate_limit_<counter>{domain, key1, key2}`): the name sanitized as its
/// stats are (`:` and `|` as `_`, and the dots of an IPv4 address), then its first three
/// dot-separated parts (deeper ones dropped; `key2` empty, so absent, for a rule one level down).
pub fn stat_labels(stats_key: &str) -> [String; 3] {
    let sanitized = sanitize(stats_key);
    let mut parts = sanitized.splitn(4, '.');
    let mut next = || parts.next().unwrap_or_default().to_string();
    [next(), next(), next()]
}

/// `:` and `|` as `_`, and the dots of each IPv4 address (`\d{1,3}(\.\d{1,3}){3}`, leftmost
/// first, as Go's regexp finds them) as `_`.
fn sanitize(name: &str) -> String {
    let bytes: Vec<u8> = name
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut out = bytes.clone();
    let mut i = 0;
    while i < bytes.len() {
        match ipv4_at(&bytes, i, 0) {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The end of an IPv4 address's remaining `groups_done..4` groups of 1 to 3 digits (a dot before
/// each but the first) starting at `i`, trying the longest run first.
fn ipv4_at(b: &[u8], i: usize, groups_done: usize) -> Option<usize> {
    if groups_done == 4 {
        return Some(i);
    }
    let start = if groups_done == 0 {
        i
    } else if b.get(i) == Some(&b'.') {
        i + 1
    } else {
        return None;
    };
    let run = b[start.min(b.len())..]
        .iter()
        .take(3)
        .take_while(|c| c.is_ascii_digit())
        .count();
    (1..=run)
        .rev()
        .find_map(|n| ipv4_at(b, start + n, groups_done + 1))
}

#[cfg(test)]
mod tests;
