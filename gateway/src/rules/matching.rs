//! A request's descriptor against a domain's tree: which rule applies (none, mostly), under
//! which stat name it is counted, and which key its fixed window counts in, as
//! envoyproxy/ratelimit decides them.

use super::{key_value, Domain, Level, Limit, Node};

/// How a level's node was found for an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// By `key_value`.
    Exact,
    /// By a wildcard's pattern.
    Wildcard,
    /// By the key alone (a node without a value): every value of that key.
    Default,
}

/// The rule a descriptor gets.
#[derive(Clone, Debug)]
pub struct Found<'r> {
    /// The node that holds it (its flags: shadow mode, the metrics').
    pub node: &'r Node,
    pub limit: &'r Limit,
    /// The name its counters are kept under (`ratelimit.service.rate_limit.<stats_key>.*`).
    pub stats_key: String,
    /// Per entry, the pattern of a `share_threshold` wildcard that matched it: all the values it
    /// matches count together, the pattern standing for the value in the key.
    shared: Vec<Option<&'r str>>,
}

impl Domain {
    /// The rule for a descriptor's `entries` (key, value), if any: the walk takes one level
    /// per entry (the exact `key_value`, else the first wildcard in the files' order that
    /// matches, else the key alone), and the node the last entry reaches gives its rule; a
    /// rule on a node the walk passes through applies to a descriptor that ends there only.
    pub fn find<'r>(&'r self, entries: &[(&str, &str)]) -> Option<Found<'r>> {
        let mut level = &self.top;
        let mut path: Vec<(&Node, How)> = Vec::with_capacity(entries.len());
        for (i, (key, value)) in entries.iter().enumerate() {
            let (node, how) = level.lookup(key, value)?;
            path.push((node, how));
            if i + 1 == entries.len() {
                let limit = node.limit.as_ref()?;
                let shared = path
                    .iter()
                    .map(|(n, _)| n.share_threshold.then_some(n.value.as_str()))
                    .collect();
                return Some(Found {
                    node,
                    limit,
                    stats_key: stats_key(&self.name, entries, &path),
                    shared,
                });
            }
            level = &node.children;
        }
        None
    }
}

impl Found<'_> {
    /// The rule's key ([`cache_key`], a shared wildcard's pattern for its value).
    pub fn cache_key(
        &self,
        prefix: &str,
        domain: &str,
        entries: &[(&str, &str)],
        tail: &str,
    ) -> String {
        cache_key(prefix, domain, entries, &self.shared, tail)
    }
}

/// A rule's key, as envoyproxy/ratelimit names its fixed window's: `prefix`, the domain, each
/// entry's key and value (or the pattern `shared` has for it: a `share_threshold` wildcard's),
/// then `tail` (there the window's start in Unix seconds), joined by `_`.
pub fn cache_key(
    prefix: &str,
    domain: &str,
    entries: &[(&str, &str)],
    shared: &[Option<&str>],
    tail: &str,
) -> String {
    let mut key = format!("{prefix}{domain}_");
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        key.push_str(shared.get(i).copied().flatten().unwrap_or(v));
        key.push('_');
    }
    key.push_str(tail);
    key
}

/// The stat name of a request's own limit (a descriptor's `limit`, which Envoy may send in
/// place of the files' rule): the domain and every entry, `key_value` (`key` with no value).
pub fn override_stats_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let mut name = domain.to_string();
    for (k, v) in entries {
        name.push('.');
        name.push_str(&key_value(k, v));
    }
    name
}

/// Drops, among one request's rules, those that another of them `replaces` by name (a rule
/// that replaces can itself be replaced: two that name each other both go).
pub fn drop_replaced(found: &mut [Option<Found<'_>>]) {
    let replaced: Vec<&str> = found
        .iter()
        .flatten()
        .flat_map(|f| f.limit.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for slot in found.iter_mut() {
        let gone = slot
            .as_ref()
            .and_then(|f| f.limit.name.as_deref())
            .is_some_and(|name| replaced.contains(&name));
        if gone {
            *slot = None;
        }
    }
}

impl Level {
    /// The node an entry reaches on this level, and how.
    fn lookup(&self, key: &str, value: &str) -> Option<(&Node, How)> {
        let joined = format!("{key}_{value}");
        if let Some(node) = self.exact.get(&joined) {
            return Some((node, How::Exact));
        }
        if let Some(node) = self
            .wildcards
            .iter()
            .find(|n| matches(&n.key_value, &joined))
        {
            return Some((node, How::Wildcard));
        }
        self.exact.get(key).map(|node| (node, How::Default))
    }
}

/// Whether `text` matches `pattern`, whose every `*` stands for any run of characters.
fn matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == text;
    }
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The stat name: the domain and, per level, the node's `key_value` as configured (a wildcard
/// its pattern, a key-only node its key); the request's value where the node asks
/// (`value_to_metric`, for nodes found by key or wildcard); every entry's own `key_value` when
/// the rule's node has `detailed_metric`. A `share_threshold` node always shows its pattern.
fn stats_key(domain: &str, entries: &[(&str, &str)], path: &[(&Node, How)]) -> String {
    let mut name = domain.to_string();
    let leaf = path.last().map(|(n, _)| *n);
    let detailed = leaf.is_some_and(|n| n.detailed_metric);
    let any_shared = path.iter().any(|(n, _)| n.share_threshold);
    for ((k, v), (node, how)) in entries.iter().zip(path) {
        name.push('.');
        let segment = if node.share_threshold {
            node.key_value.clone()
        } else if detailed {
            if any_shared {
                key_value(k, v)
            } else {
                format!("{k}_{v}")
            }
        } else if node.value_to_metric && *how != How::Exact {
            key_value(k, v)
        } else {
            node.key_value.clone()
        };
        name.push_str(&segment);
    }
    name
}
