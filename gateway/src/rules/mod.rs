//! The rules: envoyproxy/ratelimit's YAML files, verbatim, and the matching of a request's
//! descriptors to them.
//!
//! A file holds one `domain` and its `descriptors`, a tree: each node a `key` and maybe a
//! `value` (a `*` in it makes a wildcard), maybe a `rate_limit`, maybe nested `descriptors`. A
//! request's descriptor, a list of (key, value) entries, walks the tree one level per entry;
//! the node its last entry reaches gives the limit, if it has one. The files are checked as
//! that service checks them and refused with its error texts (`error.rs`): first every key and
//! value type of the whole file (`check.rs`), then each descriptor (`build.rs`).
//!
//! One extension, inside `rate_limit:`, which no file written for that service has (it would
//! refuse it as an unknown key): `algorithm:` (`fixed_window`, the default, and `gcra`,
//! `token_bucket`, `leaky_bucket`, `sliding_window`, `sliding_log`) and `burst:`; and
//! `local_budget:` with `hold:`, a hot rule's units taken a batch at a time (`crate::budget`).

mod build;
mod check;
mod error;
mod matching;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use error::RulesError;
pub use matching::{cache_key, drop_replaced, override_stats_key, Found};

/// A rule's unit: the length of its window, from the Unix epoch (`envoyproxy/ratelimit` counts a
/// month as 30 days and a year as 365, and its weeks start on Thursdays, as the epoch did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// The unit a file names, in any case; `UNKNOWN` is not one.
    pub fn parse(word: &str) -> Option<Unit> {
        Some(match word.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// Its length in seconds: a window's, and a fixed window key's TTL.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// As the files and the API's enum spell it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

/// The algorithm behind a rule (the `algorithm:` extension); a fixed window without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// envoyproxy/ratelimit's own: a window per unit from the epoch.
    FixedWindow,
    Gcra,
    TokenBucket,
    LeakyBucket,
    SlidingWindow,
    SlidingLog,
}

impl Algorithm {
    /// The algorithm a file names (lower case, as the other keys).
    pub fn parse(word: &str) -> Option<Algorithm> {
        Some(match word {
            "fixed_window" => Algorithm::FixedWindow,
            "gcra" => Algorithm::Gcra,
            "token_bucket" => Algorithm::TokenBucket,
            "leaky_bucket" => Algorithm::LeakyBucket,
            "sliding_window" => Algorithm::SlidingWindow,
            "sliding_log" => Algorithm::SlidingLog,
            _ => return None,
        })
    }

    /// As a file names it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
        }
    }

    /// Whether `burst:` means something for it (the bucket's or GCRA's capacity).
    pub fn takes_burst(self) -> bool {
        matches!(
            self,
            Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::LeakyBucket
        )
    }
}

/// A node's `rate_limit:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// None for an unlimited rule (whose unit, if any, was not a valid one).
    pub unit: Option<Unit>,
    pub requests_per_unit: u32,
    pub unlimited: bool,
    /// `name:`, which another rule's `replaces:` names.
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub algorithm: Algorithm,
    /// `burst:`, for the algorithms that take one (else the rate itself).
    pub burst: Option<u32>,
    /// `local_budget:` (and `hold:`).
    pub local_budget: Option<LocalBudget>,
}

/// A rule's local budget: the service takes up to `units` of a key's units at once and spends
/// them without a round trip each; what is unspent `hold_ms / 2` after it was taken is given
/// back (`crate::budget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocalBudget {
    pub units: u32,
    /// `hold:`, else a quarter of the unit (as the packages' default: a quarter of the period
    /// or window).
    pub hold_ms: u64,
}

/// A node of a domain's tree, as loaded.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// `key`, and `key_value` with a value: what the level is looked up by.
    pub(crate) key_value: String,
    /// The configured value (empty: none).
    pub(crate) value: String,
    /// The path from the domain: `domain.key1_value1.key2` (the `/rlconfig` line's and a
    /// duplicate's name).
    pub full_key: String,
    pub limit: Option<Limit>,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    /// `quota_mode`: taken, and shown by `dump`; decisions do not use it yet.
    pub quota_mode: bool,
    pub(crate) children: Level,
}

/// One level of a tree: its nodes by `key_value` (a key-only node by its key), and the
/// wildcard nodes in the files' order.
#[derive(Clone, Debug, Default)]
pub struct Level {
    pub(crate) exact: BTreeMap<String, Node>,
    pub(crate) wildcards: Vec<Node>,
}

/// A domain: its tree.
#[derive(Clone, Debug)]
pub struct Domain {
    pub name: String,
    pub(crate) top: Level,
}

/// `key_value`, or `key` alone with no value: how a level names a node, and how a stat name
/// shows an entry.
pub(crate) fn key_value(key: &str, value: &str) -> String {
    if value.is_empty() {
        key.to_string()
    } else {
        format!("{key}_{value}")
    }
}

/// Every domain of a set of files, as one load made them.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    domains: BTreeMap<String, Domain>,
}

impl Rules {
    /// The rules of `files` (each a name for the errors, as `config.name.yaml`, and its text),
    /// or the first file's error: the whole set is refused when one file is bad (the rules in
    /// force then stay). Two files of one domain are refused unless `merge_domains` (the
    /// service's `MERGE_DOMAIN_CONFIG`), which adds the second's descriptors to the first's.
    pub fn load<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
        merge_domains: bool,
    ) -> Result<Rules, RulesError> {
        let mut rules = Rules::default();
        for (name, text) in files {
            let value = check::parse(name, text)?;
            build::add_file(&mut rules.domains, name, &value, merge_domains)?;
        }
        Ok(rules)
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// How many domains.
    pub fn len(&self) -> usize {
        self.domains.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// One line per node with a limit, as `/rlconfig` prints them, sorted:
    /// `<full key>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <bool>, quota_mode: <bool>`.
    pub fn dump(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for domain in self.domains.values() {
            domain.top.each(&mut |node| {
                if let Some(limit) = &node.limit {
                    lines.push(format!(
                        "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                        node.full_key,
                        limit.unit.map_or("UNKNOWN", Unit::name),
                        limit.requests_per_unit,
                        node.shadow_mode,
                        node.quota_mode
                    ));
                }
            });
        }
        lines.sort();
        lines
    }
}

impl Level {
    /// Calls `f` on every node of the level and below.
    fn each(&self, f: &mut dyn FnMut(&Node)) {
        for node in self.exact.values().chain(&self.wildcards) {
            f(node);
            node.children.each(f);
        }
    }
}
