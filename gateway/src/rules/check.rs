//! The first pass over a file: YAML syntax, then every mapping key and value type of the whole
//! document, before any rule is read (as envoyproxy/ratelimit's `validateYamlKeys` does).

use serde_yaml_ng::Value;

use super::error;
use super::RulesError;

/// The keys a file may hold, at any level (that service checks one flat set): its sixteen,
/// and this service's extension's four.
const KEYS: [&str; 20] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "algorithm",
    "burst",
    "local_budget",
    "hold",
];

/// `text` parsed and its keys checked: the document, or the file's error.
pub(crate) fn parse(file: &str, text: &str) -> Result<Value, RulesError> {
    let mut value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| error::at(file, error::syntax(&go_syntax(&e))))?;
    value
        .apply_merge()
        .map_err(|e| error::at(file, error::syntax(&go_syntax(&e))))?;
    if let Value::Mapping(map) = &value {
        keys(map).map_err(|text| error::at(file, text))?;
    }
    Ok(value)
}

/// A parser's error as Go's yaml.v2 words it: `yaml: line N: <problem>`.
fn go_syntax(e: &serde_yaml_ng::Error) -> String {
    let text = e.to_string();
    let problem = text.split(" at line ").next().unwrap_or(&text);
    match e.location() {
        Some(at) => format!("yaml: line {}: {problem}", at.line()),
        None => format!("yaml: {problem}"),
    }
}

/// Every key of `map` and below: a string among `KEYS`; every value a word, number, bool,
/// nothing, a list of mappings or a mapping (`metadata` is not looked into).
fn keys(map: &serde_yaml_ng::Mapping) -> Result<(), String> {
    for (key, value) in map {
        let Value::String(name) = key else {
            return Err(error::key_not_a_string(&shown(key)));
        };
        if !KEYS.contains(&name.as_str()) {
            return Err(error::unknown_key(name));
        }
        if name == "metadata" {
            continue;
        }
        match value {
            Value::Mapping(inner) => keys(inner)?,
            Value::Sequence(list) => {
                for element in list {
                    match element {
                        Value::Mapping(inner) => keys(inner)?,
                        other => return Err(error::list_of_other_than_map(&shown(other))),
                    }
                }
            }
            Value::Number(n) if n.is_f64() => return Err(error::CHECKING.to_string()),
            Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {}
            Value::Tagged(_) => return Err(error::CHECKING.to_string()),
        }
    }
    Ok(())
}

/// A scalar as Go's `%v` prints it (a key that is not a word, a list's element).
pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(list) => {
            format!("[{}]", list.iter().map(shown).collect::<Vec<_>>().join(" "))
        }
        Value::Mapping(map) => format!(
            "map[{}]",
            map.iter()
                .map(|(k, v)| format!("{}:{}", shown(k), shown(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Value::Tagged(tagged) => shown(&tagged.value),
    }
}
