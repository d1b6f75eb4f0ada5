//! The rate limit service: envoyproxy/ratelimit's protocols and rules files in front of the
//! ratelimit module (docs/gateway.md). Its rooms:
//!
//! - `rules`: the YAML rules files, checked as that service checks them, and the matching of a
//!   request's descriptors to a rule. Pure: no I/O but the files' text it is given, no clock.
//! - `files`: where the rules files are (the `RUNTIME_*` settings) and a load of all of them.
//! - `settings`: the environment variables, envoyproxy/ratelimit's where they mean the same.
//! - `decide`: the module's decisions turned into that service's answer (statuses, the overall
//!   code, the response headers).

pub mod decide;
pub mod files;
pub mod rules;
pub mod settings;
