//! The second pass: a checked document's domain and descriptor tree, each descriptor checked
//! in envoyproxy/ratelimit's order (an empty key, a duplicate, the unit against `unlimited`,
//! `replaces`, `share_threshold`, then its children).

use std::collections::BTreeMap;

use serde_yaml_ng::{Mapping, Value};

use super::check::shown;
use super::error;
use super::{key_value, Algorithm, Domain, Level, Limit, LocalBudget, Node, RulesError, Unit};

/// Adds the file's domain (`value`, checked by `check::parse`) to `domains`.
pub(crate) fn add_file(
    domains: &mut BTreeMap<String, Domain>,
    file: &str,
    value: &Value,
    merge_domains: bool,
) -> Result<(), RulesError> {
    let fail = |text: String| error::at(file, text);
    let empty = Mapping::new();
    let map = match value {
        Value::Mapping(map) => map,
        Value::Null => &empty,
        other => {
            return Err(fail(error::syntax(&format!(
                "yaml: unmarshal errors:\n  line 1: cannot unmarshal {} into map[interface {{}}]interface {{}}",
                match other {
                    Value::Sequence(_) => "!!seq".to_string(),
                    scalar => kind(scalar),
                }
            ))))
        }
    };
    let name = word(map, "domain").map_err(fail)?;
    if name.is_empty() {
        return Err(fail(error::EMPTY_DOMAIN.to_string()));
    }
    if domains.contains_key(&name) && !merge_domains {
        return Err(fail(error::duplicate_domain(&name)));
    }
    let domain = domains.entry(name.clone()).or_insert_with(|| Domain {
        name: name.clone(),
        top: Level::default(),
    });
    add_level(&mut domain.top, &name, map.get("descriptors")).map_err(fail)
}

/// Adds the descriptors of the list `list` (if any) to `level`, whose path is `path`.
fn add_level(level: &mut Level, path: &str, list: Option<&Value>) -> Result<(), String> {
    let Some(Value::Sequence(list)) = list else {
        return Ok(());
    };
    for item in list {
        let empty = Mapping::new();
        let map = item.as_mapping().unwrap_or(&empty);
        let key = word(map, "key")?;
        if key.is_empty() {
            return Err(error::EMPTY_KEY.to_string());
        }
        let value = word(map, "value")?;
        let key_value = key_value(&key, &value);
        let full_key = format!("{path}.{key_value}");
        if level.exact.contains_key(&key_value)
            || level.wildcards.iter().any(|n| n.key_value == key_value)
        {
            return Err(error::duplicate_key(&full_key));
        }
        let limit = match map.get("rate_limit") {
            Some(Value::Mapping(rate)) => Some(limit(rate)?),
            _ => None,
        };
        let share_threshold = flag(map, "share_threshold")?;
        if share_threshold && !value.contains('*') {
            return Err(error::share_without_wildcard(&key_value));
        }
        let mut node = Node {
            key_value: key_value.clone(),
            value,
            full_key: full_key.clone(),
            limit,
            shadow_mode: flag(map, "shadow_mode")?,
            detailed_metric: flag(map, "detailed_metric")?,
            value_to_metric: flag(map, "value_to_metric")?,
            share_threshold,
            quota_mode: flag(map, "quota_mode")?,
            children: Level::default(),
        };
        add_level(&mut node.children, &full_key, map.get("descriptors"))?;
        if key_value.contains('*') {
            level.wildcards.push(node);
        } else {
            level.exact.insert(key_value, node);
        }
    }
    Ok(())
}

/// A `rate_limit:` mapping, checked.
fn limit(rate: &Mapping) -> Result<Limit, String> {
    let unit_word = word(rate, "unit")?;
    let unit = Unit::parse(&unit_word);
    let unlimited = flag(rate, "unlimited")?;
    if unlimited && unit.is_some() {
        return Err(error::UNIT_WHEN_UNLIMITED.to_string());
    }
    if !unlimited && unit.is_none() {
        return Err(error::bad_unit(&unit_word));
    }
    let name = word(rate, "name")?;
    let mut replaces = Vec::new();
    if let Some(Value::Sequence(list)) = rate.get("replaces") {
        for entry in list {
            let empty = Mapping::new();
            let replaced = word(entry.as_mapping().unwrap_or(&empty), "name")?;
            if replaced.is_empty() {
                return Err(error::EMPTY_REPLACES.to_string());
            }
            if replaced == name {
                return Err(error::REPLACES_ITSELF.to_string());
            }
            replaces.push(replaced);
        }
    }
    let algorithm_word = word(rate, "algorithm")?;
    let algorithm = if algorithm_word.is_empty() {
        Algorithm::FixedWindow
    } else {
        Algorithm::parse(&algorithm_word).ok_or_else(|| error::bad_algorithm(&algorithm_word))?
    };
    let burst = match rate.get("burst") {
        None | Some(Value::Null) => None,
        Some(_) => {
            let burst = whole(rate, "burst")?;
            if burst == 0 || !algorithm.takes_burst() {
                return Err(error::bad_burst(if algorithm_word.is_empty() {
                    "fixed_window"
                } else {
                    &algorithm_word
                }));
            }
            Some(burst)
        }
    };
    let local_budget = match rate.get("local_budget") {
        None | Some(Value::Null) => None,
        Some(_) => {
            let units = whole(rate, "local_budget")?;
            if units == 0 {
                return Err(error::BAD_LOCAL_BUDGET.to_string());
            }
            // A quarter of the unit by default, as the packages' default is of the period.
            let unit_ms = unit.map_or(1000, |u| u.seconds() * 1000);
            let hold_ms = hold(rate)?.unwrap_or(unit_ms / 4);
            Some(LocalBudget { units, hold_ms })
        }
    };
    if local_budget.is_none() && hold(rate)?.is_some() {
        return Err(error::HOLD_WITHOUT_BUDGET.to_string());
    }
    Ok(Limit {
        unit: if unlimited { None } else { unit },
        requests_per_unit: whole(rate, "requests_per_unit")?,
        unlimited,
        name: (!name.is_empty()).then_some(name),
        replaces,
        algorithm,
        burst,
        local_budget,
    })
}

/// `hold:` in ms: the module's duration grammar (a whole number and `ms`, `s`, `m`, `h` or `d`;
/// a bare number is ms), from 1 ms to 10 years.
fn hold(rate: &Mapping) -> Result<Option<u64>, String> {
    let text = word(rate, "hold")?;
    if text.is_empty() {
        return Ok(None);
    }
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let scale = match &text[digits..] {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    const TEN_YEARS_MS: u64 = 10 * 365 * 86_400_000;
    text[..digits]
        .parse::<u64>()
        .ok()
        .filter(|_| scale > 0 && !text.starts_with('0'))
        .and_then(|n| n.checked_mul(scale))
        .filter(|ms| (1..=TEN_YEARS_MS).contains(ms))
        .map(Some)
        .ok_or_else(|| error::bad_hold(&text))
}

/// A field read as a word, as Go's YAML decoder fills a string: a number or a bool as written,
/// nothing as empty.
fn word(map: &Mapping, field: &str) -> Result<String, String> {
    Ok(match map.get(field) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => return Err(error::not_a("string", field, &kind(other))),
    })
}

/// A field read as a bool: YAML 1.1's words too (`yes`, `on`...), as Go's yaml.v2 reads them.
fn flag(map: &Mapping, field: &str) -> Result<bool, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.as_str() {
            "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Ok(true),
            "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Ok(false),
            _ => Err(error::not_a("bool", field, &format!("!!str `{s}`"))),
        },
        Some(other) => Err(error::not_a("bool", field, &kind(other))),
    }
}

/// A field read as a whole number from 0 to 2^32 - 1 (nothing: 0).
fn whole(map: &Mapping, field: &str) -> Result<u32, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| error::not_a("uint32", field, &format!("!!int `{n}`"))),
        Some(other) => Err(error::not_a("uint32", field, &kind(other))),
    }
}

/// A value's YAML tag and text, as the decoder's errors show it.
fn kind(value: &Value) -> String {
    let tag = match value {
        Value::Null => "!!null",
        Value::Bool(_) => "!!bool",
        Value::Number(_) => "!!int",
        Value::String(_) => "!!str",
        Value::Sequence(_) => "!!seq",
        Value::Mapping(_) => "!!map",
        Value::Tagged(_) => "!!tagged",
    };
    format!("{tag} `{}`", shown(value))
}
