//! The calling user's key permissions (RL.TOP lists only the key names its caller may read).

use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::Ctx;

/// The user running a command, to check key names against its ACL; freed when dropped.
pub struct KeyReader<'a> {
    ctx: Ctx<'a>,
    user: NonNull<raw::RedisModuleUser>,
}

impl<'a> KeyReader<'a> {
    /// The calling user of `ctx`; `None` when the server lacks the ACL functions or the
    /// user cannot be found (then the caller may read no key name).
    pub fn caller(ctx: Ctx<'a>) -> Option<KeyReader<'a>> {
        // SAFETY: a live command context; the name is freed once, after the lookup; the
        // user is owned by the KeyReader and freed in Drop.
        unsafe {
            let (Some(name_of), Some(user_of), Some(_), Some(_)) = (
                raw::RedisModule_GetCurrentUserName,
                raw::RedisModule_GetModuleUserFromUserName,
                raw::RedisModule_ACLCheckKeyPermissions,
                raw::RedisModule_FreeModuleUser,
            ) else {
                return None;
            };
            let name = name_of(ctx.raw());
            if name.is_null() {
                return None;
            }
            let user = user_of(name);
            ctx.free_string(name);
            NonNull::new(user).map(|user| KeyReader { ctx, user })
        }
    }

    /// Whether the user may read the key named `key` (its ACL key patterns, `~` or `%R~`).
    pub fn may_read(&self, key: &[u8]) -> bool {
        let name = self.ctx.create_string(key);
        if name.is_null() {
            return false;
        }
        // SAFETY: the user is live (owned), the string made above and freed once.
        let ok = unsafe {
            raw::RedisModule_ACLCheckKeyPermissions.is_some_and(|check| {
                check(
                    self.user.as_ptr(),
                    name,
                    raw::REDISMODULE_CMD_KEY_ACCESS as c_int,
                ) == raw::REDISMODULE_OK as c_int
            })
        };
        self.ctx.free_string(name);
        ok
    }
}

impl Drop for KeyReader<'_> {
    fn drop(&mut self) {
        // SAFETY: the user was made by GetModuleUserFromUserName and is freed once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeModuleUser {
                free(self.user.as_ptr());
            }
        }
    }
}
