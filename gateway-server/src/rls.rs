//! Envoy's rate limit API on gRPC: the messages of `envoy/service/ratelimit/v3/rls.proto` this
//! service reads and writes, written from that file's field numbers and types (the wire format;
//! the tests speak to it with the messages the gRPC project generates from Envoy's own protos),
//! and `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` served on tonic, beside the
//! standard health check (`grpc.health.v1.Health/Check`).
//!
//! Written here rather than taken from `envoy-types` (all of Envoy's API, 90,000 lines of
//! generated code that cost more to compile than the rest of the service): docs/gateway.md,
//! "Crates".

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// A `google.protobuf.UInt64Value`: present (0 too) or not.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

/// `RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Entry {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `RateLimitDescriptor.RateLimitOverride` (`unit`: `envoy.type.v3.RateLimitUnit`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitOverride {
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    #[prost(int32, tag = "2")]
    pub unit: i32,
}

/// `google.protobuf.UInt64Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UInt64Value {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse` (the fields this service sets).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// `Code`: UNKNOWN 0, OK 1, OVER_LIMIT 2.
    #[prost(int32, tag = "1")]
    pub overall_code: i32,
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
}

/// `RateLimitResponse.DescriptorStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<Duration>,
}

/// `RateLimitResponse.RateLimit` (`unit`: its own `Unit`, whose numbers are the API's, with
/// WEEK 7).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    #[prost(int32, tag = "2")]
    pub unit: i32,
    #[prost(string, tag = "3")]
    pub name: String,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Duration {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse` (`status`: SERVING 1, NOT_SERVING 2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// What answers the two calls.
pub trait Handler: Send + Sync + 'static {
    fn should_rate_limit(
        &self,
        request: RateLimitRequest,
    ) -> impl Future<Output = Result<RateLimitResponse, Status>> + Send;

    /// Whether the service is serving (the health check's answer).
    fn serving(&self) -> bool;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The rate limit service (`RateLimitService/ShouldRateLimit`).
pub struct RateLimitService<H>(pub Arc<H>);

/// The standard health check (`grpc.health.v1.Health/Check`): the whole server (`""`) and
/// `ratelimit` (envoyproxy/ratelimit's name), SERVING until SIGTERM.
pub struct Health<H>(pub Arc<H>);

impl<H> Clone for RateLimitService<H> {
    fn clone(&self) -> Self {
        RateLimitService(self.0.clone())
    }
}

impl<H> Clone for Health<H> {
    fn clone(&self) -> Self {
        Health(self.0.clone())
    }
}

impl<H: Handler> NamedService for RateLimitService<H> {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl<H: Handler> NamedService for Health<H> {
    const NAME: &'static str = "grpc.health.v1.Health";
}

struct ShouldRateLimit<H>(Arc<H>);

impl<H: Handler> UnaryService<RateLimitRequest> for ShouldRateLimit<H> {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Result<Response<RateLimitResponse>, Status>>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let handler = self.0.clone();
        Box::pin(async move {
            handler
                .should_rate_limit(request.into_inner())
                .await
                .map(Response::new)
        })
    }
}

struct Check<H>(Arc<H>);

impl<H: Handler> UnaryService<HealthCheckRequest> for Check<H> {
    type Response = HealthCheckResponse;
    type Future = BoxFuture<Result<Response<HealthCheckResponse>, Status>>;

    fn call(&mut self, request: Request<HealthCheckRequest>) -> Self::Future {
        let handler = self.0.clone();
        Box::pin(async move {
            let service = request.into_inner().service;
            if !service.is_empty() && service != "ratelimit" {
                return Err(Status::not_found(format!("unknown service {service}")));
            }
            let status = if handler.serving() { 1 } else { 2 };
            Ok(Response::new(HealthCheckResponse { status }))
        })
    }
}

/// A tower service of one unary method at `path` (tonic's generated servers, by hand).
macro_rules! unary_service {
    ($server:ident, $path:literal, $method:ident) => {
        impl<H, B> tower_service::Service<http::Request<B>> for $server<H>
        where
            H: Handler,
            B: http_body::Body + Send + 'static,
            B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
        {
            type Response = http::Response<Body>;
            type Error = Infallible;
            type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, request: http::Request<B>) -> Self::Future {
                let handler = self.0.clone();
                if request.uri().path() != $path {
                    return Box::pin(async move { Ok(Status::unimplemented("").into_http()) });
                }
                Box::pin(async move {
                    let mut grpc = Grpc::new(ProstCodec::default());
                    Ok(grpc.unary($method(handler), request).await)
                })
            }
        }
    };
}

unary_service!(
    RateLimitService,
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    ShouldRateLimit
);
unary_service!(Health, "/grpc.health.v1.Health/Check", Check);
