//! The service: the rules in force, Redis, the counters; a request planned (the library's
//! `plan`), its calls sent (one round trip, or one per node), a refused request's units given
//! back, and the answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use gateway::decide::{self, Code, Decision, Status};
use gateway::plan::{self, Request, RequestError, Step};
use gateway::rules::{Rules, Unit};
use gateway::settings::Settings;

use crate::log;
use crate::metrics::Metrics;
use crate::rls;
use crate::scripts::Scripts;
use crate::store::{self, Failure, Store};

pub struct Service {
    pub settings: Settings,
    /// None until a load succeeds.
    rules: RwLock<Option<Arc<Rules>>>,
    store: Store,
    /// The script backend's scripts, where the server has no module.
    scripts: Option<Scripts>,
    pub metrics: Metrics,
    /// False from SIGTERM on: the health checks fail, the listeners drain.
    serving: AtomicBool,
}

/// A request's answer, whichever way it came.
pub struct Answer {
    pub overall: Code,
    pub statuses: Vec<Status>,
    pub headers: Vec<(String, String)>,
}

/// Why a request got no answer (gRPC UNKNOWN and `/json` 400, as there).
pub enum Refusal {
    Request(RequestError),
    Redis(Failure),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Request(e) => e.fmt(f),
            Refusal::Redis(e) => e.fmt(f),
        }
    }
}

impl Service {
    pub fn new(
        settings: Settings,
        store: Store,
        scripts: Option<Scripts>,
        rules: Option<Rules>,
    ) -> Service {
        Service {
            settings,
            rules: RwLock::new(rules.map(Arc::new)),
            store,
            scripts,
            metrics: Metrics::new(),
            serving: AtomicBool::new(true),
        }
    }

    pub fn rules(&self) -> Option<Arc<Rules>> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_rules(&self, rules: Rules) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(rules));
    }

    pub fn stop_serving(&self) {
        self.serving.store(false, Ordering::SeqCst);
    }

    /// Healthy: not stopping, and with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` a domain loaded.
    pub fn healthy(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
            && (!self.settings.healthy_needs_rules || self.rules().is_some_and(|r| !r.is_empty()))
    }

    /// Sends `calls` (the module's commands, or their scripts) and gives their replies, within
    /// `deadline`: each call's reply, or its error reply (a key of another type, say).
    async fn send_each(
        &self,
        calls: &[Vec<String>],
        deadline: std::time::Duration,
    ) -> Result<Vec<Result<redis::Value, Failure>>, Failure> {
        let started = Instant::now();
        let wire: Vec<Vec<String>> = match &self.scripts {
            Some(s) => calls.iter().map(|c| s.evalsha(c)).collect(),
            None => calls.to_vec(),
        };
        let mut replies = self.store.run(&wire, deadline).await?;
        if let Some(s) = &self.scripts {
            // A node that has not the script yet ran nothing: its text, once.
            let missing: Vec<usize> = (0..replies.len())
                .filter(|&i| {
                    replies[i]
                        .as_ref()
                        .is_err_and(|e| e.code() == Some("NOSCRIPT"))
                })
                .collect();
            if !missing.is_empty() {
                let again: Vec<Vec<String>> = missing.iter().map(|&i| s.eval(&calls[i])).collect();
                let left = deadline.saturating_sub(started.elapsed());
                let second = self.store.run(&again, left).await?;
                for (i, r) in missing.into_iter().zip(second) {
                    replies[i] = r;
                }
            }
        }
        Ok(replies
            .into_iter()
            .map(|r| r.map_err(|e| Failure::Reply(e.to_string())))
            .collect())
    }

    /// As [`Service::send_each`], failing on the first call's error.
    async fn send(
        &self,
        calls: &[Vec<String>],
        deadline: std::time::Duration,
    ) -> Result<Vec<redis::Value>, Failure> {
        self.send_each(calls, deadline).await?.into_iter().collect()
    }

    /// Decides a request: its steps, their calls in one go, and when it is refused the units its
    /// admitted descriptors took given back (a second round trip, only then). The response
    /// headers when `LIMIT_RESPONSE_HEADERS_ENABLED`, or always with `with_headers`.
    pub async fn decide(&self, request: &Request, with_headers: bool) -> Result<Answer, Refusal> {
        let rules = self.rules();
        let steps =
            plan::plan(rules.as_deref(), request, &self.settings.key_prefix).map_err(|e| {
                self.metrics.error("service_error");
                Refusal::Request(e)
            })?;
        if rules
            .as_ref()
            .is_some_and(|r| r.domain(&request.domain).is_none())
        {
            self.metrics.domain_not_found(&request.domain);
        }
        let calls: Vec<(usize, Vec<String>)> = steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Step::Call { rule, key, hits } => Some((i, rule.command(key, *hits))),
                _ => None,
            })
            .collect();
        let deadline = self.settings.redis_timeout;
        let mut replies: Vec<Option<Decision>> = vec![None; steps.len()];
        let sent: Vec<Vec<String>> = calls.iter().map(|(_, c)| c.clone()).collect();
        let outcome = match self.send_each(&sent, deadline).await {
            Ok(each) => {
                let decided: Vec<Option<Decision>> = each
                    .iter()
                    .map(|r| r.as_ref().ok().and_then(|v| store::decision(v).ok()))
                    .collect();
                match each
                    .into_iter()
                    .zip(&decided)
                    .find_map(|(r, d)| match (r, d) {
                        (Err(e), _) => Some(e),
                        (Ok(v), None) => Some(store::decision(&v).err().unwrap_or_else(|| {
                            Failure::Reply("unexpected reply from the module".to_string())
                        })),
                        _ => None,
                    }) {
                    None => Ok(decided.into_iter().flatten().collect::<Vec<_>>()),
                    Some(failure) => {
                        // One call failed (a key of another type, say): the request fails, and
                        // what the others took is given back, as for a refusal.
                        for ((i, _), d) in calls.iter().zip(&decided) {
                            replies[*i] = *d;
                        }
                        let back = plan::refunds(&steps, &replies);
                        let sent: Vec<Vec<String>> = back.into_iter().map(|(_, c)| c).collect();
                        if let Err(e) = self.send(&sent, deadline).await {
                            log::error(&format!(
                                "Redis, giving back a failed request's units: {e}"
                            ));
                        }
                        Err(failure)
                    }
                }
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(decisions) => {
                for ((i, _), d) in calls.iter().zip(decisions) {
                    replies[*i] = Some(d);
                }
            }
            Err(failure) => {
                self.metrics.error("redis_error");
                log::error(&format!("Redis: {failure}"));
                if !self.settings.fail_open {
                    return Err(Refusal::Redis(failure));
                }
                // Fail open: every descriptor allowed, as if it had no rule; counted.
                self.metrics.fail_open();
                return Ok(Answer {
                    overall: Code::Ok,
                    statuses: vec![Status::no_limit(); steps.len()],
                    headers: Vec::new(),
                });
            }
        }
        let mut answer = plan::answer(&steps, &replies, self.settings.shadow_mode);
        if self.settings.shadow_mode && answer.statuses.iter().any(|s| s.code == Code::OverLimit) {
            self.metrics.global_shadow_mode();
        }
        if answer.refused {
            let back = plan::refunds(&steps, &replies);
            let sent: Vec<Vec<String>> = back.iter().map(|(_, c)| c.clone()).collect();
            match self.send(&sent, deadline).await {
                Ok(values) => {
                    for ((i, _), v) in back.iter().zip(&values) {
                        plan::refunded(&mut answer.statuses[*i], store::given_back(v));
                    }
                }
                // The refusal stands; what the others took stays taken until their reset.
                Err(e) => log::error(&format!(
                    "Redis, giving back a refused request's units: {e}"
                )),
            }
        }
        for (step, reply) in steps.iter().zip(&replies) {
            if let (Some(c), Step::Call { rule, .. } | Step::Blocked { rule, .. }) = (
                plan::counts(step, reply.as_ref(), self.settings.near_limit_ratio),
                step,
            ) {
                self.metrics.counted(&rule.stats_key, &c);
            }
        }
        let headers = match &self.settings.response_headers {
            _ if self.settings.draft11_headers
                && (with_headers || self.settings.response_headers.is_some()) =>
            {
                plan::draft11_headers(&steps, &replies, &answer.statuses)
            }
            Some(names) => decide::headers(&answer.statuses, names),
            None if with_headers => decide::headers(&answer.statuses, &default_header_names()),
            None => Vec::new(),
        };
        Ok(Answer {
            overall: answer.overall,
            statuses: answer.statuses,
            headers,
        })
    }
}

/// envoyproxy/ratelimit's default names of its three headers.
fn default_header_names() -> [String; 3] {
    ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"].map(String::from)
}

fn code(code: Code) -> i32 {
    match code {
        Code::Ok => 1,
        Code::OverLimit => 2,
    }
}

/// The API's unit number (the response's `Unit`: WEEK is 7).
fn unit(unit: Unit) -> i32 {
    match unit {
        Unit::Second => 1,
        Unit::Minute => 2,
        Unit::Hour => 3,
        Unit::Day => 4,
        Unit::Month => 5,
        Unit::Year => 6,
        Unit::Week => 7,
    }
}

/// A gRPC request as the library's.
pub fn from_grpc(r: rls::RateLimitRequest) -> Request {
    Request {
        domain: r.domain,
        hits_addend: r.hits_addend,
        descriptors: r
            .descriptors
            .into_iter()
            .map(|d| plan::Descriptor {
                entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                limit: d.limit.map(|l| (l.requests_per_unit, l.unit)),
                hits_addend: d.hits_addend.map(|h| h.value),
            })
            .collect(),
    }
}

/// An answer as gRPC's.
pub fn to_grpc(a: Answer) -> rls::RateLimitResponse {
    rls::RateLimitResponse {
        overall_code: code(a.overall),
        statuses: a
            .statuses
            .into_iter()
            .map(|s| rls::DescriptorStatus {
                code: code(s.code),
                current_limit: s.limit.map(|(rpu, u, name)| rls::RateLimit {
                    requests_per_unit: rpu,
                    unit: unit(u),
                    name: name.unwrap_or_default(),
                }),
                limit_remaining: s.remaining,
                duration_until_reset: s.reset_seconds.map(|seconds| rls::Duration {
                    seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
            })
            .collect(),
        response_headers_to_add: a
            .headers
            .into_iter()
            .map(|(key, value)| rls::HeaderValue { key, value })
            .collect(),
    }
}

impl rls::Handler for Service {
    async fn should_rate_limit(
        &self,
        request: rls::RateLimitRequest,
    ) -> Result<rls::RateLimitResponse, tonic::Status> {
        let started = Instant::now();
        let answer = self.decide(&from_grpc(request), false).await;
        self.metrics.request("ShouldRateLimit", started.elapsed());
        answer
            .map(to_grpc)
            .map_err(|e| tonic::Status::unknown(e.to_string()))
    }

    fn serving(&self) -> bool {
        self.healthy()
    }
}
