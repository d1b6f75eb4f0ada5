//! Every error a rules file gets, in envoyproxy/ratelimit's words (its `config_impl.go`), so
//! that a file it refuses is refused here with the same text: `<file>: <text>`.

use std::fmt;

/// A file refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesError {
    /// The file's name as the loader gives it (`config.example.yaml`).
    pub file: String,
    pub text: String,
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.text)
    }
}

impl std::error::Error for RulesError {}

pub(crate) fn at(file: &str, text: String) -> RulesError {
    RulesError {
        file: file.to_string(),
        text,
    }
}

pub(crate) fn syntax(problem: &str) -> String {
    format!("error loading config file: {problem}")
}

pub(crate) fn key_not_a_string(key: &str) -> String {
    format!("config error, key is not of type string: {key}")
}

pub(crate) fn unknown_key(key: &str) -> String {
    format!("config error, unknown key '{key}'")
}

pub(crate) fn list_of_other_than_map(element: &str) -> String {
    format!("config error, yaml file contains list of type other than map: {element}")
}

pub(crate) const CHECKING: &str = "error checking config";

pub(crate) const EMPTY_DOMAIN: &str = "config file cannot have empty domain";

pub(crate) fn duplicate_domain(domain: &str) -> String {
    format!("duplicate domain '{domain}' in config file")
}

pub(crate) const EMPTY_KEY: &str = "descriptor has empty key";

pub(crate) fn duplicate_key(full_key: &str) -> String {
    format!("duplicate descriptor composite key '{full_key}'")
}

pub(crate) const UNIT_WHEN_UNLIMITED: &str = "should not specify rate limit unit when unlimited";

pub(crate) fn bad_unit(unit: &str) -> String {
    format!("invalid rate limit unit '{unit}'")
}

pub(crate) const EMPTY_REPLACES: &str = "should not have an empty replaces entry";

pub(crate) const REPLACES_ITSELF: &str = "replaces should not contain name of same descriptor";

pub(crate) fn share_without_wildcard(key_value: &str) -> String {
    format!(
        "share_threshold can only be used with wildcard values (containing '*'), but found key '{key_value}'"
    )
}

/// A field of the wrong type where envoyproxy/ratelimit's YAML decoder refuses it (a number
/// that is not a whole one in range, a list for a word).
pub(crate) fn not_a(what: &str, field: &str, got: &str) -> String {
    syntax(&format!(
        "yaml: unmarshal errors:\n  cannot unmarshal {got} into {what} ({field})"
    ))
}

/// The extension's own: an algorithm not among the module's.
pub(crate) fn bad_algorithm(word: &str) -> String {
    format!(
        "invalid rate limit algorithm '{word}': one of fixed_window, gcra, token_bucket, leaky_bucket, sliding_window, sliding_log"
    )
}

/// The extension's own: `burst` for an algorithm without one, or of 0.
pub(crate) fn bad_burst(algorithm: &str) -> String {
    format!("burst is for gcra, token_bucket and leaky_bucket, at least 1; not for {algorithm}")
}

/// The extension's own: a `local_budget` of 0.
pub(crate) const BAD_LOCAL_BUDGET: &str = "local_budget is the units taken at once: at least 1";

/// The extension's own: `hold` without `local_budget`.
pub(crate) const HOLD_WITHOUT_BUDGET: &str =
    "hold is how long a local budget's units are kept: give it with local_budget";

/// The extension's own: a `hold` that is not a duration.
pub(crate) fn bad_hold(text: &str) -> String {
    format!(
        "invalid hold '{text}': a duration from 1ms to 10 years, such as 250ms, 2s, 1m, 1h or 1d (a bare number is ms)"
    )
}
