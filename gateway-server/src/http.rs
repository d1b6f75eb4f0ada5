//! The HTTP side. On `PORT`, as envoyproxy/ratelimit serves them: `/json` (a request in proto3's
//! JSON mapping; 200, 429, or 400 `Bad Request` for a body or request it refuses) and
//! `/healthcheck` (200 `OK`, 500 once stopping); and this service's check for the proxies that
//! ask an HTTP service before passing a request on (NGINX `auth_request`, Traefik `forwardAuth`,
//! Caddy `forward_auth`): `/check/<domain>`, descriptors from the request's headers, 200 or 429
//! (or the `refuse=` status) with the rate limit fields. On `DEBUG_PORT`: `/rlconfig` (the rules
//! in force, as there) and `/metrics` (Prometheus).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use gateway::check;
use gateway::decide::Code;
use gateway::plan::Request;

use crate::service::{Answer, Refusal, Service};

pub fn main_routes(service: Arc<Service>) -> Router {
    Router::new()
        .route("/json", any(json))
        .route("/healthcheck", any(healthcheck))
        .route("/check/{domain}", any(check))
        .with_state(service)
}

pub fn debug_routes(service: Arc<Service>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(metrics))
        .with_state(service)
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [("content-type", "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn json(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let Ok(request) = gateway::json::request(&body) else {
        return text(StatusCode::BAD_REQUEST, "Bad Request\n");
    };
    let started = std::time::Instant::now();
    let answer = service.decide(&request, false).await;
    service.metrics.request("json", started.elapsed());
    match answer {
        Ok(a) => {
            let status = match a.overall {
                Code::Ok => StatusCode::OK,
                Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
            };
            let body = gateway::json::response(a.overall, &a.statuses, &a.headers);
            (status, [("content-type", "application/json")], body).into_response()
        }
        Err(Refusal::Request(_) | Refusal::Redis(_)) => {
            text(StatusCode::BAD_REQUEST, "Bad Request\n")
        }
    }
}

async fn healthcheck(State(service): State<Arc<Service>>) -> Response {
    if service.healthy() {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

/// `/check/<domain>[?refuse=403]`: 200 when the request may pass, else 429 (or the `refuse`
/// status: NGINX's `auth_request` takes only 401 and 403 as a refusal, any other status as its
/// own error), with the rate limit fields as response headers either way (draft-11's with
/// `RATELIMIT_HEADERS=draft-11`, else the three of `LIMIT_*_HEADER`; here even without
/// `LIMIT_RESPONSE_HEADERS_ENABLED`, there being no other way to send them). A check with no
/// descriptor passes; a Redis failure is 500 (fail closed) or 200 (fail open).
async fn check(
    State(service): State<Arc<Service>>,
    Path(domain): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let refuse = StatusCode::from_u16(check::refuse_status(uri.query()))
        .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let request = Request {
        domain,
        descriptors: check::descriptors(
            headers
                .get_all("x-ratelimit-descriptor")
                .iter()
                .filter_map(|v| v.to_str().ok()),
            header("x-real-ip"),
            header("x-forwarded-for"),
        ),
        hits_addend: 0,
    };
    if request.descriptors.is_empty() {
        return StatusCode::OK.into_response();
    }
    let started = std::time::Instant::now();
    let answer = service.decide(&request, true).await;
    service.metrics.request("check", started.elapsed());
    match answer {
        Ok(Answer {
            overall, headers, ..
        }) => {
            let status = if overall == Code::Ok {
                StatusCode::OK
            } else {
                refuse
            };
            let mut response = status.into_response();
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
                    response.headers_mut().append(k, v);
                }
            }
            response
        }
        Err(Refusal::Request(_)) => StatusCode::BAD_REQUEST.into_response(),
        Err(Refusal::Redis(_)) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn index() -> &'static str {
    "/metrics: the counters, in Prometheus's text format\n\
     /rlconfig: print out the currently loaded configuration for debugging\n"
}

async fn rlconfig(State(service): State<Arc<Service>>) -> String {
    service
        .rules()
        .map(|r| r.dump().iter().map(|l| format!("{l}\n")).collect())
        .unwrap_or_default()
}

async fn metrics(State(service): State<Arc<Service>>) -> Response {
    service.metrics.budgets(service.budget_stats());
    (
        [("content-type", "text/plain; version=0.0.4")],
        service.metrics.text(),
    )
        .into_response()
}
