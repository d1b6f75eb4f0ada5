//! The service's settings: envoyproxy/ratelimit's environment variables where they mean the same
//! here (names, defaults, and how a value is written: Go's bools and durations), and this
//! service's own, prefixed `RATELIMIT_`. A value that does not parse stops the service at start
//! with the variable's name.

use std::time::Duration;

use crate::files::Layout;

/// How the service reaches Redis (`REDIS_TYPE`, `REDIS_URL`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redis {
    /// `single`: one server, `host:port` or a `redis://` URL with `REDIS_SOCKET_TYPE=tcp`, a
    /// socket's path with `unix` (that service's default).
    Single(Address),
    /// `sentinel`: the primary's name and the Sentinels (`name,host:port,host:port`).
    Sentinel {
        primary: String,
        sentinels: Vec<Address>,
    },
    /// `cluster`: any of its nodes (`host:port,host:port`).
    Cluster(Vec<Address>),
}

/// One server's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(String),
    Unix(String),
}

/// Which of the module's paths a decision takes (`RATELIMIT_BACKEND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The module where the server has it, else the scripts (the packages' `auto`).
    Auto,
    Module,
    Script,
}

/// Every setting.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `HOST`, `PORT`: `/json` and `/healthcheck` (0.0.0.0, 8080).
    pub http: (String, u16),
    /// `GRPC_HOST`, `GRPC_PORT` (0.0.0.0, 8081).
    pub grpc: (String, u16),
    /// `DEBUG_HOST`, `DEBUG_PORT`: `/rlconfig` (0.0.0.0, 6070).
    pub debug: (String, u16),
    pub redis: Redis,
    /// `REDIS_AUTH`: `password`, or `user:password`.
    pub redis_auth: Option<(Option<String>, String)>,
    /// `REDIS_TLS`.
    pub redis_tls: bool,
    /// `REDIS_TIMEOUT` (10s): a Redis call's deadline, past which it fails as configured.
    pub redis_timeout: Duration,
    pub layout: Layout,
    /// `MERGE_DOMAIN_CONFIG`: several files of one domain add up.
    pub merge_domains: bool,
    /// `CACHE_KEY_PREFIX`: before every key.
    pub key_prefix: String,
    /// `NEAR_LIMIT_RATIO` (0.8): the `near_limit` stat's threshold.
    pub near_limit_ratio: f32,
    /// `SHADOW_MODE`: every request answered OK, the statuses as decided.
    pub shadow_mode: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`, and the three names (`LIMIT_LIMIT_HEADER`,
    /// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
    pub response_headers: Option<[String; 3]>,
    /// `RATELIMIT_HEADERS` (`envoy`): with `draft-11`, the response headers are the IETF
    /// draft's `RateLimit-Policy` and `RateLimit` (every descriptor with a limit) and, on a
    /// refusal, `Retry-After`, in place of the three above (still only with
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub draft11_headers: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub healthy_needs_rules: bool,
    /// `LOG_LEVEL` (warn) and `LOG_FORMAT` (text, or json).
    pub log_level: String,
    pub log_json: bool,
    /// `RATELIMIT_BACKEND` (auto).
    pub backend: Backend,
    /// `RATELIMIT_FAIL_OPEN` (false): a request Redis did not answer within the deadline is
    /// allowed (true) or fails as that service's does (false: gRPC UNKNOWN, `/json` 400).
    pub fail_open: bool,
    /// `GRPC_SERVER_USE_TLS` with `GRPC_SERVER_TLS_CERT` and `GRPC_SERVER_TLS_KEY` (PEM files),
    /// and `GRPC_CLIENT_TLS_CACERT` to require a client certificate it signed (mutual TLS).
    pub grpc_tls: Option<GrpcTls>,
}

/// TLS on the gRPC port: the server's certificate chain and key, and the CA that signs the
/// clients' certificates when they must present one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub client_ca: Option<std::path::PathBuf>,
}

/// A setting that does not parse: its variable and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError(pub String);

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingError {}

impl Settings {
    /// The settings from the process's environment.
    pub fn from_env() -> Result<Settings, SettingError> {
        Settings::from(|name| std::env::var(name).ok())
    }

    /// The settings from `get` (a variable's value, if set).
    pub fn from(get: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingError> {
        let text = |name: &str, default: &str| get(name).unwrap_or_else(|| default.to_string());
        let flag = |name: &str| match get(name) {
            None => Ok(false),
            Some(v) => go_bool(&v).ok_or_else(|| bad(name, &v, "a bool")),
        };
        let port = |name: &str, default: u16| match get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| bad(name, &v, "a port")),
        };
        let headers = flag("LIMIT_RESPONSE_HEADERS_ENABLED")?.then(|| {
            [
                text("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                text("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                text("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            ]
        });
        let timeout = text("REDIS_TIMEOUT", "10s");
        let ratio = text("NEAR_LIMIT_RATIO", "0.8");
        let backend = match text("RATELIMIT_BACKEND", "auto").as_str() {
            "auto" => Backend::Auto,
            "module" => Backend::Module,
            "script" => Backend::Script,
            other => return Err(bad("RATELIMIT_BACKEND", other, "auto, module or script")),
        };
        let draft11_headers = match text("RATELIMIT_HEADERS", "envoy").as_str() {
            "envoy" => false,
            "draft-11" => true,
            other => return Err(bad("RATELIMIT_HEADERS", other, "envoy or draft-11")),
        };
        let grpc_tls = if flag("GRPC_SERVER_USE_TLS")? {
            let file = |name: &str| match get(name).filter(|v| !v.is_empty()) {
                Some(path) => Ok(std::path::PathBuf::from(path)),
                None => Err(SettingError(format!(
                    "GRPC_SERVER_USE_TLS=true needs {name}: a PEM file"
                ))),
            };
            Some(GrpcTls {
                cert: file("GRPC_SERVER_TLS_CERT")?,
                key: file("GRPC_SERVER_TLS_KEY")?,
                client_ca: get("GRPC_CLIENT_TLS_CACERT")
                    .filter(|v| !v.is_empty())
                    .map(Into::into),
            })
        } else {
            None
        };
        let log_format = text("LOG_FORMAT", "text");
        Ok(Settings {
            http: (text("HOST", "0.0.0.0"), port("PORT", 8080)?),
            grpc: (text("GRPC_HOST", "0.0.0.0"), port("GRPC_PORT", 8081)?),
            debug: (text("DEBUG_HOST", "0.0.0.0"), port("DEBUG_PORT", 6070)?),
            redis: redis(
                &text("REDIS_TYPE", "single"),
                &text("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
                &text("REDIS_SOCKET_TYPE", "unix"),
            )?,
            redis_auth: get("REDIS_AUTH").filter(|a| !a.is_empty()).map(|a| {
                match a.split_once(':') {
                    Some((user, password)) => (Some(user.to_string()), password.to_string()),
                    None => (None, a),
                }
            }),
            redis_tls: flag("REDIS_TLS")?,
            redis_timeout: go_duration(&timeout)
                .ok_or_else(|| bad("REDIS_TIMEOUT", &timeout, "a duration such as 10s or 150ms"))?,
            layout: Layout {
                root: text("RUNTIME_ROOT", "/srv/runtime_data/current").into(),
                subdirectory: text("RUNTIME_SUBDIRECTORY", ""),
                appdirectory: text("RUNTIME_APPDIRECTORY", "config"),
                watch_root: match get("RUNTIME_WATCH_ROOT") {
                    None => true,
                    Some(v) => {
                        go_bool(&v).ok_or_else(|| bad("RUNTIME_WATCH_ROOT", &v, "a bool"))?
                    }
                },
                ignore_dotfiles: flag("RUNTIME_IGNOREDOTFILES")?,
            },
            merge_domains: flag("MERGE_DOMAIN_CONFIG")?,
            key_prefix: text("CACHE_KEY_PREFIX", ""),
            near_limit_ratio: ratio
                .parse()
                .map_err(|_| bad("NEAR_LIMIT_RATIO", &ratio, "a number"))?,
            shadow_mode: flag("SHADOW_MODE")?,
            response_headers: headers,
            draft11_headers,
            healthy_needs_rules: flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")?,
            log_level: text("LOG_LEVEL", "warn").to_ascii_lowercase(),
            log_json: match log_format.as_str() {
                "text" => false,
                "json" => true,
                other => return Err(bad("LOG_FORMAT", other, "text or json")),
            },
            backend,
            fail_open: flag("RATELIMIT_FAIL_OPEN")?,
            grpc_tls,
        })
    }
}

fn bad(name: &str, value: &str, want: &str) -> SettingError {
    SettingError(format!("{name}={value:?}: not {want}"))
}

/// `REDIS_TYPE` and `REDIS_URL` read together, in that service's words when they do not fit.
fn redis(kind: &str, url: &str, socket: &str) -> Result<Redis, SettingError> {
    let address = |a: &str| {
        if socket.eq_ignore_ascii_case("unix") && !a.contains("://") {
            Address::Unix(a.to_string())
        } else {
            Address::Tcp(a.to_string())
        }
    };
    let tcp = |list: &str| {
        list.split(',')
            .map(|a| Address::Tcp(a.to_string()))
            .collect()
    };
    match kind.to_ascii_lowercase().as_str() {
        "single" => Ok(Redis::Single(address(url))),
        "sentinel" => match url.split_once(',') {
            Some((primary, sentinels)) if !primary.is_empty() && !sentinels.is_empty() => {
                Ok(Redis::Sentinel {
                    primary: primary.to_string(),
                    sentinels: tcp(sentinels),
                })
            }
            _ => Err(SettingError(
                "Expected master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>".into(),
            )),
        },
        "cluster" => Ok(Redis::Cluster(tcp(url))),
        _ => Err(SettingError(format!("Unrecognized redis type {kind}"))),
    }
}

/// A bool as Go's `strconv.ParseBool` reads it.
pub fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A duration as Go's `time.ParseDuration` reads it (`10s`, `1m30s`, `150ms`, `2.5s`; units
/// ns, us, µs, ms, s, m, h), not negative.
pub fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit..];
        total += number * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<Settings, SettingError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from(|name| map.get(name).cloned())
    }

    #[test]
    fn that_services_defaults() {
        let s = with(&[]).unwrap();
        assert_eq!(s.http, ("0.0.0.0".into(), 8080));
        assert_eq!(s.grpc, ("0.0.0.0".into(), 8081));
        assert_eq!(s.debug, ("0.0.0.0".into(), 6070));
        assert_eq!(
            s.redis,
            Redis::Single(Address::Unix("/var/run/nutcracker/ratelimit.sock".into()))
        );
        assert_eq!(s.redis_timeout, Duration::from_secs(10));
        assert_eq!(s.layout, Layout::default());
        assert_eq!(s.near_limit_ratio, 0.8);
        assert_eq!(s.response_headers, None);
        assert_eq!(
            (s.shadow_mode, s.merge_domains, s.fail_open),
            (false, false, false)
        );
        assert_eq!(s.backend, Backend::Auto);
        assert_eq!(s.grpc_tls, None);
    }

    #[test]
    fn tls_on_the_grpc_port() {
        let s = with(&[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/c.pem"),
            ("GRPC_SERVER_TLS_KEY", "/k.pem"),
        ])
        .unwrap();
        assert_eq!(
            s.grpc_tls,
            Some(GrpcTls {
                cert: "/c.pem".into(),
                key: "/k.pem".into(),
                client_ca: None
            })
        );
        assert_eq!(
            with(&[
                ("GRPC_SERVER_USE_TLS", "1"),
                ("GRPC_SERVER_TLS_CERT", "/c.pem")
            ])
            .unwrap_err()
            .0,
            "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_KEY: a PEM file"
        );
    }

    #[test]
    fn redis_single_sentinel_and_cluster() {
        let s = with(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
            ("REDIS_AUTH", "u:p:q"),
        ])
        .unwrap();
        assert_eq!(
            s.redis,
            Redis::Single(Address::Tcp("127.0.0.1:6379".into()))
        );
        assert_eq!(s.redis_auth, Some((Some("u".into()), "p:q".into())));
        let s = with(&[
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_URL", "main,127.0.0.1:26379,127.0.0.1:26380"),
        ])
        .unwrap();
        assert_eq!(
            s.redis,
            Redis::Sentinel {
                primary: "main".into(),
                sentinels: vec![
                    Address::Tcp("127.0.0.1:26379".into()),
                    Address::Tcp("127.0.0.1:26380".into())
                ]
            }
        );
        let s = with(&[
            ("REDIS_TYPE", "cluster"),
            ("REDIS_URL", "127.0.0.1:7000,127.0.0.1:7001"),
        ])
        .unwrap();
        assert_eq!(
            s.redis,
            Redis::Cluster(vec![
                Address::Tcp("127.0.0.1:7000".into()),
                Address::Tcp("127.0.0.1:7001".into())
            ])
        );
        assert_eq!(
            with(&[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "main")]).unwrap_err().0,
            "Expected master name and a list of urls for the sentinels, in the format: <redis master name>,<sentinel1>,...,<sentineln>"
        );
        assert_eq!(
            with(&[("REDIS_TYPE", "ring")]).unwrap_err().0,
            "Unrecognized redis type ring"
        );
    }

    #[test]
    fn go_bools_and_durations() {
        let s = with(&[
            ("SHADOW_MODE", "T"),
            ("RUNTIME_WATCH_ROOT", "0"),
            ("REDIS_TIMEOUT", "1m30.5s"),
        ])
        .unwrap();
        assert!(s.shadow_mode && !s.layout.watch_root);
        assert_eq!(s.redis_timeout, Duration::from_millis(90_500));
        assert_eq!(go_duration("150us"), Some(Duration::from_micros(150)));
        assert_eq!(go_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "5x", "-1s", "s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
        assert_eq!(
            with(&[("SHADOW_MODE", "yes")]).unwrap_err().0,
            "SHADOW_MODE=\"yes\": not a bool"
        );
        assert_eq!(
            with(&[("PORT", "http")]).unwrap_err().0,
            "PORT=\"http\": not a port"
        );
    }

    #[test]
    fn response_headers_with_their_names() {
        let s = with(&[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_RESET_HEADER", "X-Reset"),
        ])
        .unwrap();
        assert_eq!(
            s.response_headers,
            Some([
                "RateLimit-Limit".into(),
                "RateLimit-Remaining".into(),
                "X-Reset".into()
            ])
        );
    }
}
