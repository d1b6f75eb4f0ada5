//! The ranges the algorithms are built for: every count and duration a command accepts lies
//! in them (the module's argument grammar refuses the rest), and the arithmetic is exact and
//! panic-free over them.

/// The largest count (limit, burst, rate, capacity, COST): 10^12.
pub const MAX_COUNT: u64 = 1_000_000_000_000;
/// The longest duration: ten 365-day years, in milliseconds.
pub const MAX_DURATION_MS: u64 = 3650 * 86_400_000;
