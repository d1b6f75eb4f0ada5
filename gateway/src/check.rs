//! The HTTP check's request (`/check/<domain>`, for NGINX `auth_request`, Traefik `forwardAuth`,
//! Caddy `forward_auth`): its descriptors from the request's headers, and the status a refusal
//! is answered with.

use crate::plan::Descriptor;

/// The descriptors of a check: each `X-RateLimit-Descriptor` header's value one descriptor, its
/// entries written as a query string (`remote_address=10.0.0.1&path=%2Fapi`); without one, the
/// client's address as `remote_address` (from `X-Real-IP`, else the first of
/// `X-Forwarded-For`), the key envoyproxy/ratelimit's most common rule counts by.
pub fn descriptors<'a>(
    descriptor_headers: impl IntoIterator<Item = &'a str>,
    real_ip: Option<&str>,
    forwarded_for: Option<&str>,
) -> Vec<Descriptor> {
    let out: Vec<Descriptor> = descriptor_headers
        .into_iter()
        .map(|v| Descriptor {
            entries: query_pairs(v),
            ..Descriptor::default()
        })
        .filter(|d| !d.entries.is_empty())
        .collect();
    if !out.is_empty() {
        return out;
    }
    real_ip
        .or_else(|| forwarded_for.and_then(|v| v.split(',').next()))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|address| Descriptor {
            entries: vec![("remote_address".to_string(), address.to_string())],
            ..Descriptor::default()
        })
        .into_iter()
        .collect()
}

/// The status a refusal gets: the query's `refuse=` (NGINX's `auth_request` takes only 401 and
/// 403 as a refusal, any other status as its own failure), else 429.
pub fn refuse_status(query: Option<&str>) -> u16 {
    query
        .map(query_pairs)
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _)| k == "refuse")
        .and_then(|(_, v)| v.parse::<u16>().ok())
        .filter(|s| (400..600).contains(s))
        .unwrap_or(429)
}

/// `a=1&b=%2F` as pairs, percent-decoded (`+` as a space).
fn query_pairs(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 3 <= bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(d: &[Descriptor]) -> Vec<Vec<(&str, &str)>> {
        d.iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn descriptors_from_headers() {
        let d = descriptors(
            ["path=%2Fapi&m=GET", "user=a+b%&é=%e2%82%ac", ""],
            None,
            None,
        );
        assert_eq!(
            entries(&d),
            [
                vec![("path", "/api"), ("m", "GET")],
                vec![("user", "a b%"), ("é", "€")]
            ]
        );
        let d = descriptors([], None, Some(" 10.0.0.9 , 10.0.0.1"));
        assert_eq!(entries(&d), [vec![("remote_address", "10.0.0.9")]]);
        let d = descriptors([], Some("10.0.0.7"), Some("10.0.0.9"));
        assert_eq!(entries(&d), [vec![("remote_address", "10.0.0.7")]]);
        assert!(descriptors([], None, None).is_empty());
    }

    #[test]
    fn the_refusals_status() {
        assert_eq!(refuse_status(None), 429);
        assert_eq!(refuse_status(Some("refuse=403")), 403);
        assert_eq!(refuse_status(Some("x=1&refuse=200")), 429);
        assert_eq!(refuse_status(Some("refuse=abc")), 429);
    }
}
