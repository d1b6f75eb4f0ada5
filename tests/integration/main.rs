//! The module's integration tests, one test binary: each file beside this one is a part (its
//! first comment says what it tests), run against real servers that `common` starts on free
//! loopback ports and stops by PID (`RATELIMIT_SERVER` names the binary, `RATELIMIT_MODULE` the
//! module; `scripts/test.sh` runs them on each server `make test` has).
//!
//! One binary rather than one per file: `common` is compiled once, not once per file. `make
//! test` runs all its parts at once (scripts/test.sh has the measure against part by part). A
//! part alone: `cargo test --release --test integration <part>::`, e.g. `examples::` (a
//! filter matches anywhere in a test's name: `policies::` runs `cluster_policies::` too).

mod common;

mod adaptive;
mod algorithms;
mod bounded;
mod cluster;
mod cluster_floods;
mod cluster_policies;
mod cluster_versions;
mod concurrency;
mod counter;
mod damaged;
mod docs;
mod durability;
mod eviction;
mod examples;
mod failover;
mod gcra;
mod hostile;
mod leases;
mod manual;
mod memory;
mod observe;
mod operations;
mod other_modules;
mod parameter_changes;
mod penalty;
mod persistence;
mod policies;
mod prometheus;
mod refunds;
mod replication;
mod retry_after;
mod security;
mod untouched;
mod version;
mod warmup;
