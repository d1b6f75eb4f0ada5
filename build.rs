//! The module's build script: one link argument, for the release's builds only.
//!
//! `scripts/dist.sh` names the target's `libgcc_s.so.1` in `RATELIMIT_LINK_UNWINDER`, so that
//! the module's `_Unwind_*` resolve there and not in the libunwind Zig links in (why: that
//! script's comment). Passed here rather than in RUSTFLAGS, the argument reaches the module's
//! link alone, so one cargo run builds the module and the gateway for a target, sharing their
//! dependencies. Without the variable (every other build) it does nothing.

fn main() {
    println!("cargo:rerun-if-env-changed=RATELIMIT_LINK_UNWINDER");
    if let Some(path) = std::env::var_os("RATELIMIT_LINK_UNWINDER") {
        println!("cargo:rustc-cdylib-link-arg={}", path.to_string_lossy());
    }
}
