//! Redis, as `REDIS_TYPE` says to reach it: one server (a pipeline per request: one round
//! trip), the primary Sentinel names (the same, found again when it is demoted or gone), or a
//! Cluster (each call routed by its key's slot, MOVED and ASK followed by redis-rs; a request's
//! calls sent at once, so that those of one node share a round trip). Every call is a module
//! command the plan made; nothing here decides.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use gateway::decide::Decision;
use gateway::settings::{Address, Redis, Settings};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, RedisConnectionInfo, RedisError, Value};

/// A connection that reconnects by itself.
#[derive(Clone)]
pub enum Store {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<Primary>),
}

/// The primary that Sentinel names, and the connection to it, replaced when it stops being the
/// primary (a write refused `READONLY`: demoted) or stops answering.
pub struct Primary {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The connection, and how many times it was replaced.
    current: RwLock<(u64, ConnectionManager)>,
    timeout: Duration,
}

impl Primary {
    async fn connect(
        sentinel: &mut SentinelClient,
        timeout: Duration,
    ) -> Result<ConnectionManager, RedisError> {
        let client = sentinel.async_get_client().await?;
        ConnectionManager::new_with_config(client, manager_config(timeout)).await
    }

    fn get(&self) -> (u64, ConnectionManager) {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Asks Sentinel again, unless another request did since `seen`.
    async fn refresh(&self, seen: u64) {
        let mut sentinel = self.sentinel.lock().await;
        if self.get().0 != seen {
            return;
        }
        match Primary::connect(&mut sentinel, self.timeout).await {
            Ok(conn) => {
                crate::log::warn("Sentinel: connected to the primary it names now");
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = (seen + 1, conn);
            }
            Err(e) => crate::log::error(&format!("Sentinel: no primary: {e}")),
        }
    }
}

fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
}

/// Sends `calls` in one pipeline; an error reply is that call's.
async fn pipeline(
    mut conn: ConnectionManager,
    calls: &[Vec<String>],
) -> Result<Vec<Result<Value, RedisError>>, RedisError> {
    let mut pipe = redis::pipe();
    for call in calls {
        pipe.cmd(&call[0]).arg(&call[1..]);
    }
    pipe.ignore_errors()
        .query_async::<Vec<redis::RedisResult<Value>>>(&mut conn)
        .await
}

/// Why a request's calls got no answer: Redis failed or took longer than the deadline.
#[derive(Debug)]
pub enum Failure {
    Redis(RedisError),
    Deadline(Duration),
    /// A reply that is not the module's five fields (a server without the module, a key of
    /// another type): the server's error text.
    Reply(String),
}

impl Failure {
    /// redis-rs's own timeout (its response timeout is the same deadline) is the deadline's.
    fn of(e: RedisError, deadline: Duration) -> Failure {
        if e.is_timeout() {
            Failure::Deadline(deadline)
        } else {
            Failure::Redis(e)
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Redis(e) => write!(f, "{e}"),
            Failure::Deadline(d) => write!(f, "no answer from Redis within {d:?}"),
            Failure::Reply(text) => f.write_str(text),
        }
    }
}

fn url(address: &Address, settings: &Settings) -> String {
    let auth = match &settings.redis_auth {
        Some((Some(user), password)) => format!("{}:{}@", encode(user), encode(password)),
        Some((None, password)) => format!(":{}@", encode(password)),
        None => String::new(),
    };
    let scheme = if settings.redis_tls {
        "rediss"
    } else {
        "redis"
    };
    match address {
        Address::Tcp(a) if a.starts_with("redis://") || a.starts_with("rediss://") => a.clone(),
        Address::Tcp(a) => format!("{scheme}://{auth}{a}"),
        Address::Unix(path) => format!("unix://{path}"),
    }
}

/// A user name or password as a URL's user info carries it.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Store {
    /// Connects as the settings say.
    pub async fn connect(settings: &Settings) -> Result<Store, String> {
        let timeout = settings.redis_timeout;
        match &settings.redis {
            Redis::Single(address) => {
                let client =
                    redis::Client::open(url(address, settings)).map_err(|e| e.to_string())?;
                let manager = ConnectionManager::new_with_config(client, manager_config(timeout))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Store::Single(manager))
            }
            Redis::Sentinel { primary, sentinels } => {
                // The Sentinels themselves without a password (REDIS_SENTINEL_AUTH is not
                // read); the primary with REDIS_AUTH.
                let plain = Settings {
                    redis_auth: None,
                    ..settings.clone()
                };
                let urls: Vec<String> = sentinels.iter().map(|s| url(s, &plain)).collect();
                let mut info = RedisConnectionInfo::default();
                if let Some((user, password)) = &settings.redis_auth {
                    info = info.set_password(password);
                    if let Some(user) = user {
                        info = info.set_username(user);
                    }
                }
                let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
                let mut sentinel = SentinelClient::build(
                    urls,
                    primary.clone(),
                    Some(node),
                    SentinelServerType::Master,
                )
                .map_err(|e| e.to_string())?;
                let conn = Primary::connect(&mut sentinel, timeout)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Store::Sentinel(Arc::new(Primary {
                    sentinel: tokio::sync::Mutex::new(sentinel),
                    current: RwLock::new((0, conn)),
                    timeout,
                })))
            }
            Redis::Cluster(nodes) => {
                let urls: Vec<String> = nodes.iter().map(|n| url(n, settings)).collect();
                let client = ClusterClient::builder(urls)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .map_err(|e| e.to_string())?;
                let conn = client
                    .get_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Store::Cluster(conn))
            }
        }
    }

    /// Whether the module is loaded (`COMMAND INFO RL.GCRA` knows it).
    pub async fn has_module(&self) -> Result<bool, RedisError> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("RL.GCRA");
        let reply = self.clone().one(&cmd).await?;
        Ok(matches!(reply, Value::Array(ref a) if a.first().is_some_and(|v| *v != Value::Nil)))
    }

    /// `SCRIPT LOAD`: the script's SHA-1 (on one node of a Cluster: the others run it by
    /// `EVAL` the first time).
    pub async fn load_script(&self, text: &str) -> Result<String, RedisError> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(text);
        match self.clone().one(&cmd).await? {
            Value::BulkString(sha) => Ok(String::from_utf8_lossy(&sha).into_owned()),
            Value::SimpleString(sha) => Ok(sha),
            other => Err(RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "SCRIPT LOAD",
                format!("{other:?}"),
            ))),
        }
    }

    async fn one(mut self, cmd: &Cmd) -> Result<Value, RedisError> {
        match &mut self {
            Store::Single(c) => c.req_packed_command(cmd).await,
            Store::Cluster(c) => c.req_packed_command(cmd).await,
            Store::Sentinel(p) => p.get().1.req_packed_command(cmd).await,
        }
    }

    /// Sends `calls` (each a command and its arguments) and gives their replies in order (an
    /// error reply as that call's error), within `deadline`.
    pub async fn run(
        &self,
        calls: &[Vec<String>],
        deadline: Duration,
    ) -> Result<Vec<Result<Value, RedisError>>, Failure> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let work = async {
            match self {
                Store::Single(c) => pipeline(c.clone(), calls)
                    .await
                    .map_err(|e| Failure::of(e, deadline)),
                Store::Sentinel(primary) => {
                    let (seen, conn) = primary.get();
                    let mut replies = pipeline(conn, calls).await;
                    let readonly = |e: &RedisError| e.code() == Some("READONLY");
                    let demoted = match &replies {
                        Ok(r) => r.iter().any(|r| r.as_ref().is_err_and(readonly)),
                        Err(e) => e.is_io_error() || e.is_connection_dropped() || readonly(e),
                    };
                    if demoted {
                        primary.refresh(seen).await;
                        // Sent again only when every call was refused as a replica's: then none
                        // took anything (a pipeline cut by the demotion may have taken some).
                        if replies
                            .as_ref()
                            .is_ok_and(|r| r.iter().all(|r| r.as_ref().is_err_and(readonly)))
                        {
                            replies = pipeline(primary.get().1, calls).await;
                        }
                    }
                    replies.map_err(|e| Failure::of(e, deadline))
                }
                Store::Cluster(c) => {
                    let sent = calls.iter().map(|call| {
                        let mut cmd = redis::cmd(&call[0]);
                        cmd.arg(&call[1..]);
                        let mut c = c.clone();
                        async move { c.req_packed_command(&cmd).await }
                    });
                    let replies = futures_util::future::join_all(sent).await;
                    // A node that did not answer fails the request; an error reply is its call's.
                    match replies
                        .iter()
                        .find_map(|r| r.as_ref().err().filter(|e| e.code().is_none()))
                    {
                        Some(e) => Err(Failure::of(e.clone(), deadline)),
                        None => Ok(replies),
                    }
                }
            }
        };
        tokio::time::timeout(deadline, work)
            .await
            .unwrap_or(Err(Failure::Deadline(deadline)))
    }
}

/// The module's reply as a decision: its first five integers (RL.LEAKYBUCKET adds a sixth).
pub fn decision(reply: &Value) -> Result<Decision, Failure> {
    let Value::Array(fields) = reply else {
        return Err(Failure::Reply(format!(
            "unexpected reply from the module: {reply:?}"
        )));
    };
    let ints: Vec<i64> = fields
        .iter()
        .take(5)
        .map(|v| match v {
            Value::Int(i) => Some(*i),
            Value::Boolean(b) => Some(i64::from(*b)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| v.len() == 5)
        .ok_or_else(|| Failure::Reply(format!("unexpected reply from the module: {reply:?}")))?;
    Ok(Decision {
        allowed: ints[0] == 1,
        limit: u64::try_from(ints[1]).unwrap_or(0),
        remaining: u64::try_from(ints[2]).unwrap_or(0),
        retry_after_ms: ints[3],
        reset_after_ms: ints[4],
    })
}

/// A reply to a command with `ATMOST`: the decision, and its sixth field, `granted`.
pub fn grant(reply: &Value) -> Result<(Decision, u64), Failure> {
    let d = decision(reply)?;
    if let Value::Array(fields) = reply {
        if let Some(Value::Int(g)) = fields.get(5) {
            return Ok((d, u64::try_from(*g).unwrap_or(0)));
        }
    }
    Err(Failure::Reply(format!(
        "unexpected reply from the module (no granted field): {reply:?}"
    )))
}

/// RL.REFUND's reply: the units given back.
pub fn given_back(reply: &Value) -> u64 {
    match reply {
        Value::Int(i) => u64::try_from(*i).unwrap_or(0),
        _ => 0,
    }
}
