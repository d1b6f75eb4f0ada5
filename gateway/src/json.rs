//! `POST /json`: a `RateLimitRequest` and its `RateLimitResponse` in proto3's JSON mapping, as
//! envoyproxy/ratelimit reads and writes them (Go's protojson): a field by its JSON name
//! (`hitsAddend`) or its proto name (`hits_addend`), 64-bit and 32-bit numbers as numbers or
//! strings, enums by name or number, an unknown field refused; the answer in camelCase with
//! zero values left out, enums by name and durations as `"37s"`.

use serde_json::{Map, Value};

use crate::decide::{Code, Status};
use crate::plan::{Descriptor, Request};

/// Why a body is not a request (answered 400 `Bad Request`, as there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadJson(pub String);

impl std::fmt::Display for BadJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(text: impl Into<String>) -> BadJson {
    BadJson(text.into())
}

/// A message's fields: each (JSON name, proto name) taken once, anything else refused.
fn fields<'v>(
    value: &'v Value,
    message: &str,
    names: &[(&str, &str)],
) -> Result<Vec<Option<&'v Value>>, BadJson> {
    let object: &Map<String, Value> = match value {
        Value::Object(o) => o,
        _ => return Err(bad(format!("{message}: not an object"))),
    };
    let mut found = vec![None; names.len()];
    for (name, v) in object {
        let i = names
            .iter()
            .position(|(json, proto)| name == json || name == proto)
            .ok_or_else(|| bad(format!("{message}: unknown field \"{name}\"")))?;
        if found[i].is_some() {
            return Err(bad(format!("{message}: field \"{name}\" given twice")));
        }
        // null is the field's default, as protojson reads it.
        found[i] = Some(v).filter(|v| !v.is_null());
    }
    Ok(found)
}

fn string(value: Option<&Value>, what: &str) -> Result<String, BadJson> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(bad(format!("{what}: not a string"))),
    }
}

/// An unsigned integer, as a number or a decimal string, at most `max`.
fn unsigned(value: Option<&Value>, what: &str, max: u64) -> Result<Option<u64>, BadJson> {
    let n = match value {
        None => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse::<u64>().ok(),
        Some(_) => None,
    };
    match n {
        Some(n) if n <= max => Ok(Some(n)),
        _ => Err(bad(format!("{what}: not an integer from 0 to {max}"))),
    }
}

fn list<'v>(value: Option<&'v Value>, what: &str) -> Result<&'v [Value], BadJson> {
    match value {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(bad(format!("{what}: not a list"))),
    }
}

/// The API's `RateLimitUnit`, by name or number.
fn unit(value: Option<&Value>) -> Result<i32, BadJson> {
    const NAMES: [&str; 7] = [
        "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR",
    ];
    match value {
        None => Ok(0),
        Some(Value::String(s)) => NAMES
            .iter()
            .position(|n| n == s)
            .map(|i| i as i32)
            .ok_or_else(|| bad(format!("unit: unknown value \"{s}\""))),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| bad("unit: not an enum number")),
        Some(_) => Err(bad("unit: not a name or a number")),
    }
}

/// The request in a body.
pub fn request(body: &[u8]) -> Result<Request, BadJson> {
    let value: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let f = fields(
        &value,
        "RateLimitRequest",
        &[
            ("domain", "domain"),
            ("descriptors", "descriptors"),
            ("hitsAddend", "hits_addend"),
        ],
    )?;
    let mut descriptors = Vec::new();
    for d in list(f[1], "descriptors")? {
        let g = fields(
            d,
            "RateLimitDescriptor",
            &[
                ("entries", "entries"),
                ("limit", "limit"),
                ("hitsAddend", "hits_addend"),
                ("isNegativeHits", "is_negative_hits"),
            ],
        )?;
        let mut entries = Vec::new();
        for e in list(g[0], "entries")? {
            let h = fields(e, "Entry", &[("key", "key"), ("value", "value")])?;
            entries.push((string(h[0], "key")?, string(h[1], "value")?));
        }
        let limit = match g[1] {
            None => None,
            Some(l) => {
                let h = fields(
                    l,
                    "RateLimitOverride",
                    &[("requestsPerUnit", "requests_per_unit"), ("unit", "unit")],
                )?;
                let rpu = unsigned(h[0], "requestsPerUnit", u64::from(u32::MAX))?.unwrap_or(0);
                Some((rpu as u32, unit(h[1])?))
            }
        };
        if let Some(v) = g[3] {
            if v != &Value::Bool(false) {
                return Err(bad("isNegativeHits: not supported"));
            }
        }
        descriptors.push(Descriptor {
            entries,
            limit,
            hits_addend: unsigned(g[2], "hitsAddend", u64::MAX)?,
        });
    }
    Ok(Request {
        domain: string(f[0], "domain")?,
        descriptors,
        hits_addend: unsigned(f[2], "hitsAddend", u64::from(u32::MAX))?.unwrap_or(0) as u32,
    })
}

fn code(code: Code) -> Value {
    Value::from(match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    })
}

/// The answer's body: `overallCode`, a status per descriptor, the headers to add.
pub fn response(overall: Code, statuses: &[Status], headers: &[(String, String)]) -> String {
    let mut out = Map::new();
    out.insert("overallCode".into(), code(overall));
    let statuses: Vec<Value> = statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            o.insert("code".into(), code(s.code));
            if let Some((rpu, unit, name)) = &s.limit {
                let mut l = Map::new();
                if let Some(name) = name {
                    l.insert("name".into(), Value::from(name.as_str()));
                }
                if *rpu != 0 {
                    l.insert("requestsPerUnit".into(), Value::from(*rpu));
                }
                l.insert("unit".into(), Value::from(unit.name()));
                o.insert("currentLimit".into(), Value::Object(l));
            }
            if s.remaining != 0 {
                o.insert("limitRemaining".into(), Value::from(s.remaining));
            }
            if let Some(seconds) = s.reset_seconds {
                o.insert(
                    "durationUntilReset".into(),
                    Value::from(format!("{seconds}s")),
                );
            }
            Value::Object(o)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !headers.is_empty() {
        let headers = headers
            .iter()
            .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Unit;

    #[test]
    fn a_request_in_either_spelling() {
        let r = request(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"},{"key":"x"}],
                "hitsAddend":"2","limit":{"requests_per_unit":5,"unit":"MINUTE"}},
                {"entries":[],"hits_addend":0}],"hits_addend":3}"#,
        )
        .unwrap();
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 3);
        assert_eq!(
            r.descriptors[0].entries,
            [("k".into(), "v".into()), ("x".into(), String::new())]
        );
        assert_eq!(r.descriptors[0].hits_addend, Some(2));
        assert_eq!(r.descriptors[0].limit, Some((5, 2)));
        assert_eq!(r.descriptors[1].hits_addend, Some(0));
        assert_eq!(request(b"{}").unwrap(), Request::default());
    }

    #[test]
    fn what_protojson_refuses() {
        for body in [
            &b""[..],
            b"[]",
            b"{\"domain\":1}",
            b"{\"domian\":\"d\"}",
            b"{\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"val\":\"v\"}]}]}",
            b"{\"hitsAddend\":-1}",
            b"{\"hitsAddend\":4294967296}",
            b"{\"descriptors\":[{\"limit\":{\"unit\":\"WEEK\"}}]}",
        ] {
            assert!(request(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn an_answer_as_protojson_writes_it() {
        let over = Status {
            code: Code::OverLimit,
            limit: Some((1, Unit::Minute, None)),
            remaining: 0,
            reset_seconds: Some(37),
            shadow_denied: false,
        };
        let ok = Status {
            code: Code::Ok,
            limit: Some((2, Unit::Minute, Some("n".into()))),
            remaining: 1,
            reset_seconds: Some(37),
            shadow_denied: false,
        };
        let body = response(
            Code::OverLimit,
            &[over, ok, Status::no_limit(), Status::unlimited()],
            &[("RateLimit-Limit".into(), "1".into())],
        );
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({"overallCode":"OVER_LIMIT","statuses":[
                {"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},
                 "durationUntilReset":"37s"},
                {"code":"OK","currentLimit":{"name":"n","requestsPerUnit":2,"unit":"MINUTE"},
                 "limitRemaining":1,"durationUntilReset":"37s"},
                {"code":"OK"},
                {"code":"OK","limitRemaining":4294967295u32}],
              "responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"1"}]})
        );
    }
}
