//! Command registration: creating a command, its ACL categories (Redis 7.2+), its
//! `COMMAND DOCS`/`COMMAND INFO` entry.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

use super::Ctx;

/// An `extern "C"` command entry point (see [`super::cmd_func`]).
pub type CommandHandle =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Creates the command `name` (from the load hook); whether Redis accepted it.
pub fn create_command(
    ctx: Ctx<'_>,
    name: &CStr,
    handler: CommandHandle,
    flags: &CStr,
    (first, last, step): (c_int, c_int, c_int),
) -> bool {
    // SAFETY: the load hook's context; the strings are NUL-terminated; the handler is a
    // `'static` function. Checked at load.
    unsafe {
        raw::RedisModule_CreateCommand.is_some_and(|create| {
            create(
                ctx.raw(),
                name.as_ptr(),
                Some(handler),
                flags.as_ptr(),
                first,
                last,
                step,
            ) == raw::REDISMODULE_OK as c_int
        })
    }
}

/// The handle of the command `name`, created by this module.
fn command(ctx: Ctx<'_>, name: &CStr) -> Option<*mut raw::RedisModuleCommand> {
    // SAFETY: the load hook's context; the name is NUL-terminated.
    let handle = unsafe { raw::RedisModule_GetCommand.map(|get| get(ctx.raw(), name.as_ptr())) };
    handle.filter(|handle| !handle.is_null())
}

/// Puts the command `name` in the ACL categories `acl` (space-separated). `None` when the
/// server has no such API (before 7.2), else whether Redis accepted them.
pub fn set_acl_categories(ctx: Ctx<'_>, name: &CStr, acl: &CStr) -> Option<bool> {
    // SAFETY: reads a pointer set once at load.
    let set = unsafe { raw::RedisModule_SetCommandACLCategories }?;
    let Some(handle) = command(ctx, name) else {
        return Some(false);
    };
    // SAFETY: a handle of this module's command; the categories are NUL-terminated.
    Some(unsafe { set(handle, acl.as_ptr()) } == raw::REDISMODULE_OK as c_int)
}

/// Gives Redis the `COMMAND DOCS`/`COMMAND INFO` entry of the command `name`. `None` when
/// the server has no such API, else whether Redis accepted it (Redis copies all of it).
///
/// # Safety
/// Every pointer in `info` (strings, arrays, the version) is valid for the call.
pub(super) unsafe fn set_command_info(
    ctx: Ctx<'_>,
    name: &CStr,
    info: &raw::RedisModuleCommandInfo,
) -> Option<bool> {
    // SAFETY: reads a pointer set once at load.
    let set = unsafe { raw::RedisModule_SetCommandInfo }?;
    let Some(handle) = command(ctx, name) else {
        return Some(false);
    };
    // SAFETY: a handle of this module's command; every pointer in `info` is valid for the
    // call (the caller's promise), and Redis copies what it keeps.
    Some(unsafe { set(handle, info) } == raw::REDISMODULE_OK as c_int)
}
