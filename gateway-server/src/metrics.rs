//! The counters, at `/metrics` in Prometheus's text format, named as envoyproxy/ratelimit's
//! built-in mapping names its stats (`ratelimit_service_rate_limit_total_hits{domain, key1,
//! key2}` and the others), so that its dashboards and alerts read them unchanged; plus this
//! service's own (`ratelimit_service_fail_open`, and the local budgets' `ratelimit_local_budget_*`).

use std::time::Duration;

use gateway::plan::{stat_labels, Counts};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// Per rule: total_hits, over_limit, near_limit, within_limit, shadow_mode.
    per_rule: [IntCounterVec; 5],
    errors: IntCounterVec,
    domain_not_found: IntCounterVec,
    requests: IntCounterVec,
    response_time: HistogramVec,
    config_load_success: IntCounter,
    config_load_error: IntCounter,
    global_shadow_mode: IntCounter,
    fail_open: IntCounter,
    /// The local budgets': local_admitted, refunded, refund_failures (counted here), and
    /// refills, expired, held (the budgets' own, read at each scrape).
    local_admitted: IntCounter,
    refunded: IntCounter,
    refund_failures: IntCounter,
    refills: IntCounter,
    expired: IntCounter,
    held: IntGauge,
}

const PER_RULE: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("a valid metric name");
    registry
        .register(Box::new(c.clone()))
        .expect("registered once");
    c
}

fn counters(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric name");
    registry
        .register(Box::new(c.clone()))
        .expect("registered once");
    c
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let per_rule = PER_RULE.map(|stat| {
            counters(
                &registry,
                &format!("ratelimit_service_rate_limit_{stat}"),
                &format!("{stat} of a rule (envoyproxy/ratelimit's stat)"),
                &["domain", "key1", "key2"],
            )
        });
        let response_time = HistogramVec::new(
            HistogramOpts::new(
                "ratelimit_service_response_time_seconds",
                "time to answer a request",
            ),
            &["grpc_method"],
        )
        .expect("a valid metric name");
        registry
            .register(Box::new(response_time.clone()))
            .expect("registered once");
        Metrics {
            per_rule,
            errors: counters(
                &registry,
                "ratelimit_service_should_rate_limit_error",
                "requests that got no answer, by cause (redis_error, service_error)",
                &["err_type"],
            ),
            domain_not_found: counters(
                &registry,
                "ratelimit_service_rate_limit_domain_not_found",
                "requests for a domain no rules file has",
                &["domain"],
            ),
            requests: counters(
                &registry,
                "ratelimit_service_total_requests",
                "requests answered",
                &["grpc_method"],
            ),
            response_time,
            config_load_success: counter(
                &registry,
                "ratelimit_service_config_load_success",
                "loads of the rules files that replaced the rules",
            ),
            config_load_error: counter(
                &registry,
                "ratelimit_service_config_load_error",
                "loads of the rules files refused (the rules in force stayed)",
            ),
            global_shadow_mode: counter(
                &registry,
                "ratelimit_service_global_shadow_mode",
                "refused requests answered OK by SHADOW_MODE",
            ),
            fail_open: counter(
                &registry,
                "ratelimit_service_fail_open",
                "requests allowed because Redis failed or was late (RATELIMIT_FAIL_OPEN)",
            ),
            local_admitted: counter(
                &registry,
                "ratelimit_local_budget_local_admitted",
                "descriptors admitted from a local budget, without a round trip of their own",
            ),
            refunded: counter(
                &registry,
                "ratelimit_local_budget_refunded",
                "local budgets' units given back with RL.REFUND (the module's count)",
            ),
            refund_failures: counter(
                &registry,
                "ratelimit_local_budget_refund_failures",
                "local budgets' units not given back (Redis failed): counted until the algorithm frees them",
            ),
            refills: counter(
                &registry,
                "ratelimit_local_budget_refills",
                "ATMOST calls that filled a local budget",
            ),
            expired: counter(
                &registry,
                "ratelimit_local_budget_expired",
                "fixed windows' units dropped unspent at their window's end",
            ),
            held: {
                let g = IntGauge::new(
                    "ratelimit_local_budget_held",
                    "units the local budgets hold unspent now",
                )
                .expect("a valid metric name");
                registry
                    .register(Box::new(g.clone()))
                    .expect("registered once");
                g
            },
            registry,
        }
    }

    pub fn local_admitted(&self, n: usize) {
        self.local_admitted.inc_by(n as u64);
    }

    pub fn refunded(&self, units: u64) {
        self.refunded.inc_by(units);
    }

    pub fn refund_failed(&self, units: u64) {
        self.refund_failures.inc_by(units);
    }

    /// The budgets' own counters, as they stand now.
    pub fn budgets(&self, stats: gateway::budget::Stats) {
        self.refills
            .inc_by(stats.refills.saturating_sub(self.refills.get()));
        self.expired
            .inc_by(stats.expired.saturating_sub(self.expired.get()));
        self.held.set(i64::try_from(stats.held).unwrap_or(i64::MAX));
    }

    /// A rule's decision counted under its stat name.
    pub fn counted(&self, stats_key: &str, c: &Counts) {
        let labels = stat_labels(stats_key);
        let labels = [labels[0].as_str(), labels[1].as_str(), labels[2].as_str()];
        let values = [
            c.total_hits,
            c.over_limit,
            c.near_limit,
            c.within_limit,
            c.shadow_mode,
        ];
        // All five, 0 too: a rule's series exist from its first request.
        for (vec, value) in self.per_rule.iter().zip(values) {
            vec.with_label_values(&labels).inc_by(value);
        }
    }

    pub fn error(&self, err_type: &str) {
        self.errors.with_label_values(&[err_type]).inc();
    }

    pub fn domain_not_found(&self, domain: &str) {
        self.domain_not_found.with_label_values(&[domain]).inc();
    }

    pub fn request(&self, method: &str, took: Duration) {
        self.requests.with_label_values(&[method]).inc();
        self.response_time
            .with_label_values(&[method])
            .observe(took.as_secs_f64());
    }

    pub fn loaded(&self, ok: bool) {
        if ok {
            self.config_load_success.inc();
        } else {
            self.config_load_error.inc();
        }
    }

    pub fn global_shadow_mode(&self) {
        self.global_shadow_mode.inc();
    }

    pub fn fail_open(&self) {
        self.fail_open.inc();
    }

    /// Every metric in the text format.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail but for a metric family without metrics, which the
        // registry never gathers.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
