//! The service: the rules in force, Redis, the counters; a request planned (the library's
//! `plan`), its calls sent (one round trip, or one per node), a refused request's units given
//! back, and the answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use gateway::budget::{Take, Taken};
use gateway::decide::{self, Code, Decision, Status};
use gateway::plan::{self, Request, RequestError, Step};
use gateway::rules::{Rules, Unit};
use gateway::settings::Settings;

use crate::local::Local;
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
    /// The local budgets (`local_budget:` rules).
    local: Local,
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
            local: Local::new(),
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
    /// admitted descriptors took given back (a second round trip, only then; a local budget's
    /// go back to it). The response headers when `LIMIT_RESPONSE_HEADERS_ENABLED`, or always
    /// with `with_headers`.
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
        let deadline = self.settings.redis_timeout;
        let (replies, taken) = match self.resolve(&steps, deadline).await {
            Ok(resolved) => resolved,
            Err(failure) => {
                // The deadline as configured (the rounds were given what was left of it).
                let failure = match failure {
                    Failure::Deadline(_) => Failure::Deadline(deadline),
                    other => other,
                };
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
        };
        let mut answer = plan::answer(&steps, &replies, self.settings.shadow_mode);
        if self.settings.shadow_mode && answer.statuses.iter().any(|s| s.code == Code::OverLimit) {
            self.metrics.global_shadow_mode();
        }
        if answer.refused {
            let local: Vec<usize> = taken.iter().map(|(i, _)| *i).collect();
            if !taken.is_empty() {
                let mut budgets = self.local.lock();
                let now = self.local.now();
                for (i, t) in taken {
                    budgets.put_back(t, now);
                    if let Step::Call { hits, .. } = &steps[i] {
                        plan::refunded(&mut answer.statuses[i], *hits);
                    }
                }
            }
            let back: Vec<(usize, Vec<String>)> = plan::refunds(&steps, &replies)
                .into_iter()
                .filter(|(i, _)| !local.contains(i))
                .collect();
            if !back.is_empty() {
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

    /// The module's (or a local budget's) decision of each step that makes a call, and what
    /// each descriptor a budget admitted took from it. The calls go in one round trip: the
    /// steps without a budget, and the refills of the budgets that are empty; a budget whose
    /// refill another request has in flight is waited for first. A descriptor still short
    /// after its refill (a request of several units that the refill did not cover) asks
    /// again, up to three rounds.
    async fn resolve(
        &self,
        steps: &[Step],
        deadline: std::time::Duration,
    ) -> Result<Resolved, Failure> {
        let started = Instant::now();
        let mut replies: Vec<Option<Decision>> = vec![None; steps.len()];
        let mut taken: Vec<(usize, Taken)> = Vec::new();
        let (mut pending, mut remote) = (Vec::new(), Vec::new());
        for (i, step) in steps.iter().enumerate() {
            if let Step::Call { rule, hits, .. } = step {
                if budgeted(rule, *hits) {
                    pending.push(i);
                } else {
                    remote.push(i);
                }
            }
        }
        // The module's steps are sent in the first round: what they took is given back when a
        // later round fails.
        let sent_remote = remote.clone();
        for round in 1.. {
            let left = deadline.saturating_sub(started.elapsed());
            let (refills, mut next) = if pending.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                match self
                    .claim(steps, &pending, &mut replies, &mut taken, left)
                    .await
                {
                    Ok(claimed) => claimed,
                    Err(failure) => {
                        let taken = std::mem::take(&mut taken);
                        self.undo(steps, &sent_remote, &[], &replies, taken, left)
                            .await;
                        return Err(failure);
                    }
                }
            };
            let mut calls: Vec<Vec<String>> = Vec::new();
            for &i in &remote {
                if let Step::Call { rule, key, hits } = &steps[i] {
                    calls.push(rule.command(key, *hits));
                }
            }
            for &(i, units) in &refills {
                if let Step::Call { rule, key, .. } = &steps[i] {
                    calls.push(rule.refill(key, units));
                }
            }
            if calls.is_empty() {
                break;
            }
            let sent = self.local.now();
            let left = deadline.saturating_sub(started.elapsed());
            let each = match self.send_each(&calls, left).await {
                Ok(each) => each,
                Err(failure) => {
                    self.undo(
                        steps,
                        &sent_remote,
                        &refills,
                        &replies,
                        std::mem::take(&mut taken),
                        left,
                    )
                    .await;
                    return Err(failure);
                }
            };
            let mut each = each.into_iter();
            let decided: Vec<Result<Decision, Failure>> = (&mut each)
                .take(remote.len())
                .map(|r| r.and_then(|v| store::decision(&v)))
                .collect();
            let granted: Vec<Result<(Decision, u64), Failure>> =
                each.map(|r| r.and_then(|v| store::grant(&v))).collect();
            for (&i, d) in remote.iter().zip(&decided) {
                replies[i] = d.as_ref().ok().copied();
            }
            let mut failed: Option<Failure> = None;
            for d in decided {
                if let Err(e) = d {
                    failed.get_or_insert(e);
                }
            }
            let mut any_granted = false;
            {
                let mut budgets = self.local.lock();
                let now = self.local.now();
                for (&(i, _), g) in refills.iter().zip(granted) {
                    let Step::Call { rule, key, hits } = &steps[i] else {
                        continue;
                    };
                    match g {
                        Err(e) => {
                            budgets.cancel(key, now);
                            failed.get_or_insert(e);
                        }
                        Ok((d, units)) => {
                            budgets.refilled(key, Some((d, units)), sent, now);
                            if units > 0 {
                                any_granted = true;
                            }
                            if failed.is_some() {
                                continue;
                            }
                            if units == 0 {
                                replies[i] = Some(d);
                                continue;
                            }
                            match budgets.take(key, rule, *hits, now) {
                                Take::Spent(d, t) => {
                                    replies[i] = Some(d);
                                    taken.push((i, t));
                                }
                                Take::Denied(d) => replies[i] = Some(d),
                                // Short: asks again next round; refused with this reply
                                // if the rounds run out.
                                short => {
                                    if matches!(short, Take::Refill(_)) {
                                        budgets.cancel(key, now);
                                    }
                                    replies[i] = Some(Decision {
                                        allowed: false,
                                        remaining: 0,
                                        ..d
                                    });
                                    next.push(i);
                                }
                            }
                        }
                    }
                }
            }
            self.local.refilled.notify_waiters();
            if any_granted {
                self.local.wake.notify_one();
            }
            if let Some(failure) = failed {
                // One call failed (a key of another type, say): the request fails, and what
                // the others took is given back, as for a refusal.
                let left = deadline.saturating_sub(started.elapsed());
                self.undo(
                    steps,
                    &sent_remote,
                    &[],
                    &replies,
                    std::mem::take(&mut taken),
                    left,
                )
                .await;
                return Err(failure);
            }
            remote.clear();
            pending = next;
            if pending.is_empty() {
                break;
            }
            if round == 3 {
                // Still short after three refills: refused with the last reply (or, not
                // asked yet, with nothing remaining).
                for &i in &pending {
                    if let (Step::Call { rule, .. }, None) = (&steps[i], replies[i]) {
                        replies[i] = Some(Decision {
                            allowed: false,
                            limit: u64::from(rule.requests_per_unit),
                            remaining: 0,
                            retry_after_ms: 0,
                            reset_after_ms: 0,
                        });
                    }
                }
                break;
            }
        }
        Ok((replies, taken))
    }

    /// The budgets' part of a round: each pending step spent from its budget, refused by a
    /// remembered denial, or to refill (this request sends it). When a step's budget has a
    /// refill in flight, nothing of the round is kept and the request waits for a refill to
    /// come back, then asks again (within `deadline`).
    async fn claim(
        &self,
        steps: &[Step],
        pending: &[usize],
        replies: &mut [Option<Decision>],
        taken: &mut Vec<(usize, Taken)>,
        deadline: std::time::Duration,
    ) -> Result<Claimed, Failure> {
        let started = Instant::now();
        loop {
            let back = self.local.refilled.notified();
            tokio::pin!(back);
            back.as_mut().enable();
            {
                let mut budgets = self.local.lock();
                let now = self.local.now();
                let (mut refills, mut spent, mut waits) = (Vec::new(), Vec::new(), false);
                let mut after = Vec::new();
                for &i in pending {
                    let Step::Call { rule, key, hits } = &steps[i] else {
                        continue;
                    };
                    match budgets.take(key, rule, *hits, now) {
                        Take::Spent(d, t) => {
                            replies[i] = Some(d);
                            spent.push((i, t));
                        }
                        Take::Denied(d) => replies[i] = Some(d),
                        Take::Refill(units) => refills.push((i, units)),
                        // The refill in flight is this request's own (the same descriptor
                        // twice): served from it next round.
                        Take::Wait if refills.iter().any(|&(j, _)| same_key(steps, i, j)) => {
                            after.push(i)
                        }
                        Take::Wait => waits = true,
                    }
                }
                if !waits {
                    self.metrics.local_admitted(spent.len());
                    taken.extend(spent);
                    return Ok((refills, after));
                }
                for (i, t) in spent {
                    budgets.put_back(t, now);
                    replies[i] = None;
                }
                for (i, _) in refills {
                    if let Step::Call { key, .. } = &steps[i] {
                        budgets.cancel(key, now);
                    }
                }
                for &i in pending {
                    replies[i] = None;
                }
            }
            let left = deadline.saturating_sub(started.elapsed());
            if tokio::time::timeout(left, back).await.is_err() {
                return Err(Failure::Deadline(deadline));
            }
        }
    }

    /// A failed request's units given back: what `taken` holds to its budgets, the `remote`
    /// steps' the module admitted with `RL.REFUND`, and the `refills` not answered cancelled.
    async fn undo(
        &self,
        steps: &[Step],
        remote: &[usize],
        refills: &[(usize, u64)],
        replies: &[Option<Decision>],
        taken: Vec<(usize, Taken)>,
        deadline: std::time::Duration,
    ) {
        {
            let mut budgets = self.local.lock();
            let now = self.local.now();
            for (_, t) in taken {
                budgets.put_back(t, now);
            }
            for (i, _) in refills {
                if let Step::Call { key, .. } = &steps[*i] {
                    budgets.cancel(key, now);
                }
            }
        }
        if !refills.is_empty() {
            self.local.refilled.notify_waiters();
        }
        let back: Vec<Vec<String>> = plan::refunds(steps, replies)
            .into_iter()
            .filter(|(i, _)| remote.contains(i))
            .map(|(_, c)| c)
            .collect();
        if !back.is_empty() {
            if let Err(e) = self.send(&back, deadline).await {
                log::error(&format!("Redis, giving back a failed request's units: {e}"));
            }
        }
    }

    /// Gives back the local budgets' units due now (all of them with `everything`), and says
    /// how long until the next are due.
    pub async fn give_back(&self, everything: bool) -> Option<std::time::Duration> {
        let (due, next) = self.local.due(everything);
        if !due.is_empty() {
            let calls: Vec<Vec<String>> = due
                .iter()
                .map(|(key, units)| vec!["RL.REFUND".to_string(), key.clone(), units.to_string()])
                .collect();
            match self.send_each(&calls, self.settings.redis_timeout).await {
                Ok(each) => {
                    for ((key, units), r) in due.iter().zip(each) {
                        match r {
                            Ok(v) => self.metrics.refunded(store::given_back(&v)),
                            Err(e) => {
                                self.metrics.refund_failed(*units);
                                log::error(&format!(
                                    "Redis, giving back {units} units of {key}: {e}"
                                ));
                            }
                        }
                    }
                }
                Err(e) => {
                    self.metrics.refund_failed(due.iter().map(|(_, u)| u).sum());
                    log::error(&format!("Redis, giving back local budgets' units: {e}"));
                }
            }
        }
        next
    }

    /// The local budgets' sweeper: gives back the units due, then sleeps until the next are
    /// due or a refill adds some.
    pub async fn sweep(self: Arc<Self>) {
        loop {
            match self.give_back(false).await {
                Some(next) => {
                    let _ = tokio::time::timeout(next, self.local.wake.notified()).await;
                }
                None => self.local.wake.notified().await,
            }
        }
    }

    /// The local budgets' counters for `/metrics`.
    pub fn budget_stats(&self) -> gateway::budget::Stats {
        self.local.lock().stats
    }
}

/// Each step's decision, and what the descriptors a local budget admitted took from it.
type Resolved = (Vec<Option<Decision>>, Vec<(usize, Taken)>);

/// A round's claims: the refills to send (step, units), and the steps to ask again once they
/// are back (a descriptor whose key this request is refilling already).
type Claimed = (Vec<(usize, u64)>, Vec<usize>);

/// Whether two steps are calls on one key.
fn same_key(steps: &[Step], i: usize, j: usize) -> bool {
    matches!((&steps[i], &steps[j]), (Step::Call { key: a, .. }, Step::Call { key: b, .. }) if a == b)
}

/// Whether a step is decided by its rule's local budget: a cost of 1 to the budget's units (a
/// larger one, or 0, goes to the module as it is).
fn budgeted(rule: &plan::Rule, hits: u64) -> bool {
    rule.local_budget
        .is_some_and(|b| (1..=u64::from(b.units)).contains(&hits))
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
