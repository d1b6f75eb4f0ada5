//! `ratelimit-gateway`: envoyproxy/ratelimit's drop-in, every decision a call to the ratelimit
//! module (docs/gateway.md). Its rooms: `rls` (Envoy's gRPC API), `http` (`/json`,
//! `/healthcheck`, the proxies' check, the debug port), `service` (a request from plan to
//! answer), `store` (Redis), `scripts` (the script backend), `reload` (the rules files watched), `metrics`, `log`. What a
//! request means and what its answer is are the library's (`gateway`, in ../gateway).

mod http;
mod local;
mod log;
mod metrics;
mod reload;
mod rls;
mod scripts;
mod service;
mod store;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use gateway::settings::{Backend, Settings};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::scripts::Scripts;
use crate::service::Service;
use crate::store::Store;

/// How long in-flight requests get to finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(10);

fn address((host, port): &(String, u16)) -> Result<SocketAddr, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    format!(
        "{}:{port}",
        if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        }
    )
    .parse()
    .map_err(|_| format!("not an address to listen on: {host}:{port}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ratelimit-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    log::init(&settings.log_level, settings.log_json);
    match run(settings).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error(&e);
            ExitCode::FAILURE
        }
    }
}

async fn run(settings: Settings) -> Result<(), String> {
    let (grpc, http, debug) = (
        address(&settings.grpc)?,
        address(&settings.http)?,
        address(&settings.debug)?,
    );
    let (seen, rules) = reload::first(&settings);
    // As envoyproxy/ratelimit: Redis first, retried with a growing wait, then the listeners.
    let mut wait = Duration::from_secs(1);
    let store = loop {
        match Store::connect(&settings).await {
            Ok(store) => break store,
            Err(e) => {
                log::warn(&format!("connecting to Redis: {e}; again in {wait:?}"));
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    };
    let has_module = store
        .has_module()
        .await
        .map_err(|e| format!("Redis: {e}"))?;
    let scripts = match (settings.backend, has_module) {
        (Backend::Module, false) => {
            return Err(
                "RATELIMIT_BACKEND=module: the ratelimit module is not loaded in Redis \
                 (COMMAND INFO RL.GCRA knows no such command)"
                    .to_string(),
            )
        }
        (Backend::Module | Backend::Auto, true) => None,
        (Backend::Script, _) | (Backend::Auto, false) => {
            let mut loaded = Vec::new();
            for (command, text) in Scripts::texts() {
                let sha = store.load_script(&text).await.map_err(|e| {
                    format!("the script backend needs a Lua scripting engine, and SCRIPT LOAD failed: {e}")
                })?;
                loaded.push((command, text, sha));
            }
            log::warn("the ratelimit module is not used: the script backend (clients/lua)");
            Some(Scripts::new(loaded))
        }
    };
    // The first load is counted as every later one is (none when the folder was unreadable).
    let first_load = seen.is_some().then_some(rules.is_some());
    let service = Arc::new(Service::new(settings, store, scripts, rules));
    if let Some(ok) = first_load {
        service.metrics.loaded(ok);
    }
    tokio::spawn(reload::watch(service.clone(), seen, Duration::from_secs(1)));
    tokio::spawn(service.clone().sweep());

    let grpc_listener = TcpListener::bind(grpc)
        .await
        .map_err(|e| format!("gRPC on {grpc}: {e}"))?;
    let http_listener = TcpListener::bind(http)
        .await
        .map_err(|e| format!("HTTP on {http}: {e}"))?;
    let debug_listener = TcpListener::bind(debug)
        .await
        .map_err(|e| format!("debug on {debug}: {e}"))?;
    let (stop, stopping) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let mut grpc_builder = tonic::transport::Server::builder();
    if let Some(tls) = &service.settings.grpc_tls {
        grpc_builder = grpc_builder
            .tls_config(tls_config(tls)?)
            .map_err(|e| format!("GRPC_SERVER_USE_TLS: {e}"))?;
    }
    let grpc_server = grpc_builder
        .add_service(rls::RateLimitService(service.clone()))
        .add_service(rls::Health(service.clone()))
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY, a reply waits for the client's delayed ACK (Nagle's
            // algorithm): make bench's p99 was 43 ms.
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            stopped(stopping.clone()),
        );
    let nodelay = |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    };
    let http_server = axum::serve(
        http_listener.tap_io(nodelay),
        http::main_routes(service.clone()),
    )
    .with_graceful_shutdown(stopped(stopping.clone()));
    let debug_server = axum::serve(
        debug_listener.tap_io(nodelay),
        http::debug_routes(service.clone()),
    )
    .with_graceful_shutdown(stopped(stopping.clone()));
    log::info(&format!(
        "listening: gRPC {grpc}, HTTP {http}, debug {debug}"
    ));
    let servers = async {
        let (g, h, d) = tokio::join!(grpc_server, http_server, debug_server);
        g.map_err(|e| e.to_string())?;
        h.map_err(|e| e.to_string())?;
        d.map_err(|e| e.to_string())
    };
    tokio::pin!(servers);
    tokio::select! {
        result = &mut servers => return result,
        () = signalled() => {}
    }
    // SIGTERM: the health checks fail from now on, the listeners close, in-flight requests finish.
    log::info("stopping: draining in-flight requests");
    service.stop_serving();
    let _ = stop.send(true);
    let drained = match tokio::time::timeout(DRAIN, servers).await {
        Ok(result) => result,
        Err(_) => {
            log::warn(&format!(
                "stopping: requests still in flight after {DRAIN:?}"
            ));
            Ok(())
        }
    };
    // The local budgets' units given back, every one still held.
    service.give_back(true).await;
    drained
}

/// The gRPC port's TLS: the certificate chain and key, and the CA of the clients' certificates
/// when they must present one. Read once, at start (a new certificate takes a restart).
fn tls_config(
    tls: &gateway::settings::GrpcTls,
) -> Result<tonic::transport::ServerTlsConfig, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("GRPC_SERVER_USE_TLS: {}: {e}", path.display()))
    };
    let identity = tonic::transport::Identity::from_pem(read(&tls.cert)?, read(&tls.key)?);
    let mut config = tonic::transport::ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &tls.client_ca {
        config = config.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    Ok(config)
}

/// SIGTERM or SIGINT.
async fn signalled() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
