//! The rate limit service: envoyproxy/ratelimit's protocols and rules files in front of the
//! ratelimit module (docs/gateway.md). Its rooms:
//!
//! - `rules`: the YAML rules files, checked as that service checks them, and the matching of a
//!   request's descriptors to a rule. Pure: no I/O but the files' text it is given, no clock.

pub mod rules;
