//! The rate limit service: envoyproxy/ratelimit's protocols and rules files in front of the
//! ratelimit module (docs/gateway.md). Its rooms:
//!
//! - `rules`: the YAML rules files, checked as that service checks them, and the matching of a
//!   request's descriptors to a rule. Pure: no I/O but the files' text it is given, no clock.
//! - `files`: where the rules files are (the `RUNTIME_*` settings) and a load of all of them.
//! - `settings`: the environment variables, envoyproxy/ratelimit's where they mean the same.
//! - `json`: `POST /json`'s body, proto3's JSON mapping of the API's messages.
//! - `plan`: one request's module calls, from its descriptors, and its answer, from their
//!   replies (statuses, refunds of a refused request, counters).
//! - `check`: the HTTP check's request (NGINX `auth_request` and the like): its descriptors
//!   from the request's headers.
//! - `scripts`: the script backend's Lua, where the server has no module: which script stands
//!   for a command, its text assembled from its parts.
//! - `budget`: local budgets, a hot rule's units taken a batch at a time and spent here (the
//!   packages' rule and promise); pure, on the caller's clock.
//! - `decide`: the module's decisions turned into that service's answer (statuses, the overall
//!   code, the response headers).

pub mod budget;
pub mod check;
pub mod decide;
pub mod files;
pub mod json;
pub mod plan;
pub mod rules;
pub mod scripts;
pub mod settings;
