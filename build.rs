//! The module's build script: one link argument, for the release's builds only.
//!
//! `scripts/zigbuild.sh` (make dist's and make test's cargo-zigbuild) names each target's
//! `libgcc_s.so.1` in `RATELIMIT_LINK_UNWINDER_<target>` (`RATELIMIT_LINK_UNWINDER_x86_64_unknown_linux_gnu`),
//! so that the module's `_Unwind_*` resolve there and not in the libunwind Zig links in (why:
//! `scripts/dist.sh`). Passed here rather than in RUSTFLAGS, the argument reaches the module's
//! link alone, so one cargo run builds the module and the gateway for both targets, sharing
//! their dependencies. Without the variable (every other build) it does nothing.

fn main() {
    // Cargo sets TARGET for every build script; the variable's name has it with `_` for `-`.
    let target = std::env::var("TARGET")
        .unwrap_or_default()
        .replace('-', "_");
    let name = format!("RATELIMIT_LINK_UNWINDER_{target}");
    println!("cargo:rerun-if-env-changed={name}");
    if let Some(path) = std::env::var_os(&name) {
        println!("cargo:rustc-cdylib-link-arg={}", path.to_string_lossy());
    }
}
