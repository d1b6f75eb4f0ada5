//! `make bench`'s Limitador row: Kuadrant's Limitador (the `limitador` crate; its server,
//! limitador-server, is not on crates.io) answering `envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit`, its counters in Redis through its async storage (`AsyncRedisStorage`, what
//! `limitador-server redis URL` runs, no local cache). scripts/bench_gateway.py starts it beside
//! the gateway, against the same redis-server.
//!
//! ```text
//! limitador-rls REDIS_URL DOMAIN
//! ```
//!
//! It listens on a free loopback port, and prints `listening 127.0.0.1:PORT` once Redis has
//! answered (Limitador's scripts loaded) and the port is bound: the bench waits for that line.
//!
//! A request is read as limitador-server reads it (its `envoy_rls/server.rs`): the domain is
//! the namespace; the descriptors become one context, the list `descriptors` with one map of
//! entries per descriptor, which every limit of the namespace is tested against in one call;
//! `hits_addend` 0 counts as 1; a Redis error is UNAVAILABLE. The limits are the bench's rules
//! (scripts/bench_gateway.py, `rules()`): for each key `d<i>`, 1e9 requests per 60 s fixed
//! window, one counter per value. Limitador has no rule per descriptor as envoyproxy/ratelimit
//! has, so the limit for `d<i>` reads descriptor i (where the bench client puts it):
//! condition `size(descriptors) > i`, variable `descriptors[i].d<i>`. A request of D
//! descriptors so counts D counters, each once, as the gateway does.

use std::collections::HashMap;
use std::sync::Arc;

use limitador::limit::{Context, Expression, Limit, Namespace, Predicate};
use limitador::storage::redis::AsyncRedisStorage;
use limitador::AsyncRateLimiter;
use tonic::Status;

// The gateway's own messages and server glue (Envoy's field numbers), not Limitador's code.
#[allow(dead_code)]
#[path = "../../../gateway-server/src/rls.rs"]
mod rls;

/// The descriptor keys of the bench's rules, and their limit (requests per window).
const KEYS: usize = 4;
const MAX_VALUE: u64 = 1_000_000_000;
const WINDOW_SECONDS: u64 = 60;

/// `overall_code`: OK and OVER_LIMIT (UNKNOWN for a request without a domain).
const UNKNOWN: i32 = 0;
const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

struct Limitador {
    limiter: AsyncRateLimiter,
}

/// The bench's rules as Limitador's limits in `domain`.
fn limits(domain: &str) -> Result<Vec<Limit>, String> {
    (0..KEYS)
        .map(|i| {
            let condition =
                Predicate::parse(format!("size(descriptors) > {i}")).map_err(|e| e.to_string())?;
            let variable =
                Expression::parse(format!("descriptors[{i}].d{i}")).map_err(|e| e.to_string())?;
            Ok(Limit::new(
                domain,
                MAX_VALUE,
                WINDOW_SECONDS,
                [condition],
                [variable],
            ))
        })
        .collect()
}

impl rls::Handler for Limitador {
    async fn should_rate_limit(
        &self,
        request: rls::RateLimitRequest,
    ) -> Result<rls::RateLimitResponse, Status> {
        let answer = |overall_code| rls::RateLimitResponse {
            overall_code,
            statuses: Vec::new(),
            response_headers_to_add: Vec::new(),
        };
        if request.domain.is_empty() {
            return Ok(answer(UNKNOWN));
        }
        let descriptors: Vec<HashMap<String, String>> = request
            .descriptors
            .into_iter()
            .map(|d| d.entries.into_iter().map(|e| (e.key, e.value)).collect())
            .collect();
        let mut ctx = Context::default();
        ctx.list_binding("descriptors".to_string(), descriptors);
        let hits = u64::from(request.hits_addend.max(1));
        let namespace = Namespace::from(request.domain);
        match self
            .limiter
            .check_rate_limited_and_update(&namespace, &ctx, hits)
            .await
        {
            Ok(checked) if checked.limited => Ok(answer(OVER_LIMIT)),
            Ok(_) => Ok(answer(OK)),
            Err(e) => Err(Status::unavailable(e.to_string())),
        }
    }

    fn serving(&self) -> bool {
        true
    }
}

async fn serve(redis_url: &str, domain: &str) -> Result<(), String> {
    let storage = AsyncRedisStorage::new(redis_url)
        .await
        .map_err(|e| format!("Redis at {redis_url}: {e}"))?;
    let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
    for limit in limits(domain)? {
        limiter.add_limit(limit);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening {address}");
    let service = Arc::new(Limitador { limiter });
    tonic::transport::Server::builder()
        .add_service(rls::RateLimitService(service.clone()))
        .add_service(rls::Health(service))
        // TCP_NODELAY, as the gateway sets it (its main.rs).
        .serve_with_incoming(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: limitador-rls REDIS_URL DOMAIN");
        std::process::exit(2);
    }
    if let Err(e) = serve(&args[1], &args[2]).await {
        eprintln!("limitador-rls: {e}");
        std::process::exit(1);
    }
}
