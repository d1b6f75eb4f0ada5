//! Timers and server events: what the module runs outside any command. Each handler is a
//! safe function, the one method of a type implementing [`Timer`] or [`ServerEvent`]; the
//! `extern "C"` function Redis calls is a trampoline here, generic over that type (as
//! [`super::cmd_func`] is for the commands), which holds the raw pointers, the panic guard and
//! the reason it is sound.

use std::os::raw::{c_int, c_void};
use std::panic::catch_unwind;

use redis_module::raw;

use super::Ctx;

/// What a timer runs (see [`Ctx::timer`]).
pub trait Timer {
    /// Runs on the main thread, from the event loop, outside any command; `ctx` may
    /// propagate. A panic is caught and ends the call.
    fn fire(ctx: Ctx<'_>);
}

/// What runs when a server event fires (see [`Ctx::subscribe`]).
pub trait ServerEvent {
    /// The event (`REDISMODULE_EVENT_*`).
    const EVENT: u64;

    /// Runs on the main thread with the event's subevent (`REDISMODULE_SUBEVENT_*`). A panic
    /// is caught and ends the call.
    fn fired(ctx: Ctx<'_>, subevent: u64);
}

impl Ctx<'_> {
    /// Subscribes `E` to its server event; whether the server accepted it.
    pub fn subscribe<E: ServerEvent>(self) -> bool {
        let event = raw::RedisModuleEvent {
            id: E::EVENT,
            dataver: 1,
        };
        // SAFETY: the load hook's context; the callback is a `'static` function.
        unsafe {
            raw::RedisModule_SubscribeToServerEvent.is_some_and(|subscribe| {
                subscribe(self.raw(), event, Some(event_callback::<E>))
                    == raw::REDISMODULE_OK as c_int
            })
        }
    }

    /// Runs `T` from the event loop after `ms`; whether a timer was set.
    pub fn timer<T: Timer>(self, ms: i64) -> bool {
        // SAFETY: a live context; the callback is a `'static` function and gets no data.
        unsafe {
            raw::RedisModule_CreateTimer.is_some_and(|create| {
                create(
                    self.raw(),
                    ms,
                    Some(timer_callback::<T>),
                    std::ptr::null_mut(),
                );
                true
            })
        }
    }
}

/// The `extern "C"` function of the timer `T` (set by [`Ctx::timer`]).
extern "C" fn timer_callback<T: Timer>(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    // SAFETY: Redis calls a timer with a live context, valid until it returns, and the data
    // it was set with (none); the context does not escape `T::fire`.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return;
    };
    let _ = catch_unwind(|| T::fire(ctx));
}

/// The `extern "C"` function of the server event handler `E` (subscribed by
/// [`Ctx::subscribe`]). The event's data is not read: no handler needs it.
extern "C" fn event_callback<E: ServerEvent>(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    // SAFETY: Redis calls an event's callback with a live context, valid until it returns;
    // the context does not escape `E::fired`.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return;
    };
    let _ = catch_unwind(|| E::fired(ctx, subevent));
}
