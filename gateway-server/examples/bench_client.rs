//! `make bench`'s load (scripts/bench_gateway.py runs it): requests with D descriptors each, S at
//! a time, to a rate limit service over gRPC (this service, or another that speaks Envoy's
//! API), or, as the floor of what a fixed window costs, the commands envoyproxy/ratelimit sends
//! for the same request (an `INCRBY` and an `EXPIRE` per descriptor, pipelined) straight to
//! Redis from the same client code, or (`module`) this service's own calls for it (an
//! `RL.FIXEDWINDOW` per descriptor, with the key and arguments the service sends for
//! scripts/bench_gateway.py's rules), pipelined the same way. Prints one JSON line: requests/s,
//! p50 and p99 in µs, errors and refusals.
//!
//! ```text
//! bench_client grpc 127.0.0.1:8081 DOMAIN DESCRIPTORS STREAMS REQUESTS USERS
//! bench_client pipeline 127.0.0.1:6379 DOMAIN DESCRIPTORS STREAMS REQUESTS USERS
//! bench_client module 127.0.0.1:6379 DOMAIN DESCRIPTORS STREAMS REQUESTS USERS
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tonic::codegen::http::uri::PathAndQuery;
use tonic_prost::ProstCodec;

// The service's own messages (Envoy's field numbers); the handler side is not used here.
#[allow(dead_code)]
#[path = "../src/rls.rs"]
mod rls;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

struct Load {
    domain: String,
    descriptors: usize,
    streams: usize,
    requests: usize,
    users: usize,
}

/// What one request asks: descriptor i is `(d<i>, u<user>)`.
fn request(load: &Load, user: usize) -> rls::RateLimitRequest {
    rls::RateLimitRequest {
        domain: load.domain.clone(),
        descriptors: (0..load.descriptors)
            .map(|i| rls::RateLimitDescriptor {
                entries: vec![rls::Entry {
                    key: format!("d{i}"),
                    value: format!("u{user}"),
                }],
                limit: None,
                hits_addend: None,
                is_negative_hits: false,
            })
            .collect(),
        hits_addend: 0,
    }
}

/// The keys envoyproxy/ratelimit would count the request's descriptors in (a minute's window).
fn keys(load: &Load, user: usize) -> Vec<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    (0..load.descriptors)
        .map(|i| format!("{}_d{i}_u{user}_{}", load.domain, now / 60 * 60))
        .collect()
}

enum Target {
    Grpc(tonic::transport::Channel),
    Pipeline(redis::aio::MultiplexedConnection),
    Module(redis::aio::MultiplexedConnection),
}

/// One request: its latency, and whether it was refused (OVER_LIMIT) or failed.
async fn one(target: &Target, load: &Load, user: usize) -> (Duration, bool, bool) {
    let started = Instant::now();
    let (refused, failed) = match target {
        Target::Grpc(channel) => {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            match grpc.ready().await {
                Err(_) => (false, true),
                Ok(()) => {
                    let answer = grpc
                        .unary::<_, rls::RateLimitResponse, _>(
                            tonic::Request::new(request(load, user)),
                            PathAndQuery::from_static(PATH),
                            ProstCodec::default(),
                        )
                        .await;
                    match answer {
                        Ok(r) => (r.get_ref().overall_code == 2, false),
                        Err(_) => (false, true),
                    }
                }
            }
        }
        Target::Pipeline(conn) => {
            let mut pipe = redis::pipe();
            for key in keys(load, user) {
                pipe.cmd("INCRBY").arg(&key).arg(1).ignore();
                pipe.cmd("EXPIRE").arg(&key).arg(60).ignore();
            }
            let mut conn = conn.clone();
            (false, pipe.query_async::<()>(&mut conn).await.is_err())
        }
        Target::Module(conn) => {
            let mut pipe = redis::pipe();
            for i in 0..load.descriptors {
                // The service's key and call for the rules scripts/bench_gateway.py writes.
                pipe.cmd("RL.FIXEDWINDOW")
                    .arg(format!("{}_d{i}_u{user}_minute", load.domain))
                    .arg(1_000_000_000)
                    .arg("60s")
                    .arg("COST")
                    .arg(1)
                    .ignore();
            }
            let mut conn = conn.clone();
            (false, pipe.query_async::<()>(&mut conn).await.is_err())
        }
    };
    (started.elapsed(), refused, failed)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 8 {
        eprintln!(
            "usage: bench_client grpc|pipeline|module ADDRESS DOMAIN DESCRIPTORS STREAMS REQUESTS USERS"
        );
        std::process::exit(2);
    }
    let number = |i: usize| -> usize {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!("not a number: {}", args[i]);
            std::process::exit(2)
        })
    };
    let load = Arc::new(Load {
        domain: args[3].clone(),
        descriptors: number(4),
        streams: number(5),
        requests: number(6),
        users: number(7),
    });
    let target = Arc::new(match args[1].as_str() {
        "grpc" => {
            let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", args[2]))
                .expect("an address");
            Target::Grpc(endpoint.connect().await.expect("the service answers"))
        }
        kind @ ("pipeline" | "module") => {
            let client = redis::Client::open(format!("redis://{}", args[2])).expect("an address");
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("Redis answers");
            if kind == "pipeline" {
                Target::Pipeline(conn)
            } else {
                Target::Module(conn)
            }
        }
        other => {
            eprintln!("not a target: {other}");
            std::process::exit(2)
        }
    });
    let started = Instant::now();
    let tasks: Vec<_> = (0..load.streams)
        .map(|s| {
            let (load, target) = (load.clone(), target.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut k = s;
                while k < load.requests {
                    seen.push(one(&target, &load, k % load.users).await);
                    k += load.streams;
                }
                seen
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(load.requests);
    let (mut refused, mut failed) = (0, 0);
    for t in tasks {
        for (latency, r, f) in t.await.expect("a stream ran") {
            latencies.push(latency.as_micros() as u64);
            refused += usize::from(r);
            failed += usize::from(f);
        }
    }
    let took = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "{{\"requests\": {}, \"per_second\": {:.0}, \"p50_us\": {}, \"p99_us\": {}, \"refused\": {refused}, \"failed\": {failed}}}",
        latencies.len(),
        latencies.len() as f64 / took,
        at(0.50),
        at(0.99),
    );
}
