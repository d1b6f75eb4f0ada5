//! What `COMMAND DOCS` and `COMMAND INFO` say about each command: a summary, the complexity,
//! every argument with its type, and the key spec. `redis-cli` builds its argument hints from
//! this, as for built-in commands.
//!
//! What it says comes from the syntax table (`args::syntax`), which also renders the arity
//! errors and drives the policy grammar; this file only converts an entry to the raw form.
//! [`describe`] hands one entry to Redis with `RedisModule_SetCommandInfo` right after the
//! command is created. Redis copies everything it is given (`RM_SetCommandInfo` duplicates
//! every string and array), so the raw structures built here live only for that call.
//!
//! Nothing here can stop the module from loading: a command without an entry, a server
//! without `RedisModule_SetCommandInfo` (before Redis 7.0), or an entry Redis refuses is
//! logged, and the command works as before, only without docs.
//!
//! The arity is always -1 ("at least the name"): Redis then never answers a wrong argument
//! count itself, and every command keeps its own error, which names its syntax. (An arity of
//! 0 also means -1 on Redis 7.0, but would mean -2 for a command with subcommands.)

use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use super::{Command, Ctx};
use crate::args::syntax::{find, Arg, KeyUse, Kind};

/// The module version that introduced the commands: all of them come with the first release.
const SINCE: &CStr = c"1.0.0";

/// See the module docs: the commands check their own argument counts.
const ARITY: c_int = -1;

/// The raw form of the table's types, as `RedisModule_SetCommandInfo` takes them.
trait Raw {
    type Out;
    fn raw(self) -> Self::Out;
}

impl Raw for KeyUse {
    type Out = u64;
    fn raw(self) -> u64 {
        let flags = match self {
            KeyUse::None => 0,
            KeyUse::Update => {
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE
            }
            KeyUse::Remove => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
            KeyUse::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
            KeyUse::Overwrite => raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
        };
        u64::from(flags)
    }
}

impl Raw for Kind {
    type Out = raw::RedisModuleCommandArgType;
    fn raw(self) -> raw::RedisModuleCommandArgType {
        match self {
            Kind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            Kind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            Kind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            Kind::Token => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            Kind::OneOf(_) => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
            Kind::Block(_) => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
        }
    }
}

impl Raw for &Arg {
    type Out = c_int;
    fn raw(self) -> c_int {
        let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
        if self.optional {
            flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
        }
        if self.multiple {
            flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
        }
        flags as c_int
    }
}

/// What [`describe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Described,
    /// The table has no entry for the command (a bug: a unit test checks for it).
    NoDocs,
    /// The server has no `RedisModule_SetCommandInfo` (before Redis 7.0).
    NoApi,
    /// Redis refused the entry (it logs why), or something failed here.
    Refused,
}

/// The server lacks the API: said once, not once per command.
static NO_API_LOGGED: AtomicBool = AtomicBool::new(false);

/// Gives Redis the documentation of `command`, just created. Never fails the load: whatever
/// goes wrong is logged and the command runs without docs.
pub fn describe(ctx: Ctx, command: &Command) -> Outcome {
    let outcome = catch_unwind(AssertUnwindSafe(|| set_info(ctx, command)));
    let outcome = outcome.unwrap_or(Outcome::Refused);
    let name = command.name.to_string_lossy();
    match outcome {
        Outcome::Described => {}
        Outcome::NoDocs => log(
            ctx,
            &format!("ratelimit: no COMMAND DOCS entry for {name}: it loads without docs"),
        ),
        Outcome::NoApi => {
            if !NO_API_LOGGED.swap(true, Ordering::Relaxed) {
                log(
                    ctx,
                    "ratelimit: this server has no RedisModule_SetCommandInfo (Redis 7.0 added it): \
                     the commands load without COMMAND DOCS and COMMAND INFO details",
                );
            }
        }
        Outcome::Refused => log(
            ctx,
            &format!("ratelimit: Redis refused the COMMAND DOCS of {name}: it loads without docs"),
        ),
    }
    outcome
}

fn set_info(ctx: Ctx, command: &Command) -> Outcome {
    let Some(doc) = find(command.name.to_bytes()) else {
        return Outcome::NoDocs;
    };
    // SAFETY: reading the API pointers the module's load filled in (or left empty).
    let (Some(get), Some(set)) = (unsafe { raw::RedisModule_GetCommand }, unsafe {
        raw::RedisModule_SetCommandInfo
    }) else {
        return Outcome::NoApi;
    };
    // SAFETY: called from the load hook with its context, after the command was created.
    let handle = unsafe { get(ctx, command.name.as_ptr()) };
    if handle.is_null() {
        return Outcome::Refused;
    }
    let mut keep = Vec::new();
    let args = if doc.args.is_empty() {
        ptr::null_mut()
    } else {
        lower(doc.args, &mut keep)
    };
    let mut key_specs = key_specs(doc.key);
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: SINCE.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: ARITY,
        key_specs: if doc.key == KeyUse::None {
            ptr::null_mut()
        } else {
            key_specs.as_mut_ptr()
        },
        args,
    };
    // SAFETY: every pointer in `info` points into `version`, `key_specs`, `keep` or static
    // strings, all alive until this call returns; Redis copies what it keeps.
    let status = unsafe { set(handle, &info) };
    if status == raw::REDISMODULE_OK as c_int {
        Outcome::Described
    } else {
        Outcome::Refused
    }
}

/// The one key spec of a keyed command (the key at argument 1), and the zeroed entry that
/// ends the array.
fn key_specs(key: KeyUse) -> [raw::RedisModuleCommandKeySpec; 2] {
    let spec = |flags: u64, begin, pos, find, keystep| raw::RedisModuleCommandKeySpec {
        notes: ptr::null(),
        flags,
        begin_search_type: begin,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos },
        },
        find_keys_type: find,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep,
                limit: 0,
            },
        },
    };
    [
        spec(
            key.raw(),
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            1,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            1,
        ),
        spec(
            0,
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID,
            0,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_OMITTED,
            0,
        ),
    ]
}

/// `args` as Redis's array, ended by a zeroed entry; the arrays (this one and those of the
/// sub-arguments) are kept in `keep`, which must outlive their use.
fn lower(
    args: &[Arg],
    keep: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut level = Vec::with_capacity(args.len() + 1);
    for arg in args {
        let subargs = match arg.kind.subargs() {
            [] => ptr::null_mut(),
            subargs => lower(subargs, keep),
        };
        level.push(raw::RedisModuleCommandArg {
            name: arg.name.as_ptr(),
            type_: arg.kind.raw(),
            key_spec_index: if matches!(arg.kind, Kind::Key) { 0 } else { -1 },
            token: arg.token.map_or(ptr::null(), CStr::as_ptr),
            summary: arg.summary.as_ptr(),
            since: ptr::null(),
            flags: arg.raw(),
            deprecated_since: ptr::null(),
            subargs,
            display_text: ptr::null(),
        });
    }
    level.push(raw::RedisModuleCommandArg {
        name: ptr::null(),
        type_: 0,
        key_spec_index: 0,
        token: ptr::null(),
        summary: ptr::null(),
        since: ptr::null(),
        flags: 0,
        deprecated_since: ptr::null(),
        subargs: ptr::null_mut(),
        display_text: ptr::null(),
    });
    // The vector's buffer does not move when the vector is moved into `keep`.
    let first = level.as_mut_ptr();
    keep.push(level);
    first
}

/// A warning in the server's log; nothing when there is no server (unit tests).
fn log(ctx: Ctx, message: &str) {
    crate::log::log(ctx, crate::log::Level::Warning, message);
}

#[cfg(test)]
mod tests {
    use super::super::{When, COMMANDS, NO_KEYS};
    use super::*;
    use crate::args::syntax::ALL as DOCS;

    #[test]
    fn every_command_has_docs() {
        for command in COMMANDS {
            let name = command.name.to_str().unwrap();
            assert!(
                find(name.as_bytes()).is_some(),
                "{name} has no entry in DOCS"
            );
        }
    }

    #[test]
    fn the_key_spec_agrees_with_the_command_table() {
        for command in COMMANDS {
            let name = command.name.to_str().unwrap();
            let doc = find(name.as_bytes()).unwrap();
            let flags = command.flags.to_str().unwrap();
            let expected = if command.keys == NO_KEYS {
                vec![KeyUse::None]
            } else if flags.split(' ').any(|f| f == "readonly") {
                vec![KeyUse::Read]
            } else {
                vec![KeyUse::Update, KeyUse::Remove, KeyUse::Overwrite]
            };
            assert!(expected.contains(&doc.key), "{name}: {:?}", doc.key);
        }
        assert!(COMMANDS.iter().any(|c| c.when == When::CellCompat));
    }

    /// The rules `RM_SetCommandInfo` checks, so that Redis never refuses an entry; and
    /// what the docs promise: one key, first.
    #[test]
    fn every_entry_is_one_redis_accepts() {
        fn check(name: &str, args: &[Arg]) {
            let mut names: Vec<&CStr> = args.iter().map(|a| a.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(
                names.len(),
                args.len(),
                "{name}: two arguments share a name"
            );
            for arg in args {
                let what = format!("{name} {:?}", arg.name);
                assert!(!arg.name.is_empty() && !arg.summary.is_empty(), "{what}");
                match arg.kind {
                    Kind::Token => assert!(arg.token.is_some(), "{what}: a token needs its word"),
                    Kind::OneOf(subargs) | Kind::Block(subargs) => {
                        assert!(!subargs.is_empty(), "{what}");
                        check(name, subargs);
                    }
                    Kind::Key => panic!("{what}: a key inside a group"),
                    Kind::Integer | Kind::String => {}
                }
            }
        }
        let mut seen = Vec::new();
        for doc in DOCS {
            assert!(!seen.contains(&doc.name), "{} twice", doc.name);
            seen.push(doc.name);
            assert_eq!(doc.name, doc.name.to_lowercase());
            assert!(!doc.summary.is_empty() && !doc.complexity.is_empty());
            let keys = doc
                .args
                .iter()
                .filter(|a| matches!(a.kind, Kind::Key))
                .count();
            if doc.key == KeyUse::None {
                assert_eq!(keys, 0, "{}", doc.name);
                check(doc.name, doc.args);
            } else {
                assert_eq!(keys, 1, "{}", doc.name);
                assert!(matches!(doc.args[0].kind, Kind::Key), "{}", doc.name);
                assert!(!doc.args[0].optional && !doc.args[0].multiple);
                check(doc.name, &doc.args[1..]);
            }
            if doc.key != KeyUse::None {
                let flags = doc.key.raw();
                let access = raw::REDISMODULE_CMD_KEY_RO
                    | raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_OW
                    | raw::REDISMODULE_CMD_KEY_RM;
                let write = raw::REDISMODULE_CMD_KEY_INSERT
                    | raw::REDISMODULE_CMD_KEY_DELETE
                    | raw::REDISMODULE_CMD_KEY_UPDATE;
                assert_eq!((flags & u64::from(access)).count_ones(), 1, "{}", doc.name);
                assert!((flags & u64::from(write)).count_ones() <= 1, "{}", doc.name);
            }
        }
    }

    #[test]
    fn the_raw_arrays_end_with_a_zeroed_entry() {
        let doc = find(b"RL.DEBUG.CLOCK").unwrap();
        let mut keep = Vec::new();
        let first = lower(doc.args, &mut keep);
        assert_eq!(keep.len(), 2, "the group's own array, then the command's");
        let top = keep.last().unwrap();
        assert_eq!(top.as_ptr(), first as *const _);
        assert_eq!(top.len(), 2);
        assert!(top[1].name.is_null());
        let group = &keep[0];
        assert_eq!(top[0].subargs as *const _, group.as_ptr());
        assert_eq!(group.len(), 4);
        assert!(group[3].name.is_null());
        assert_eq!(group[2].type_, Kind::Token.raw());
        let specs = key_specs(KeyUse::Read);
        assert_eq!(specs[1].begin_search_type, 0);
        assert_eq!(
            specs[0].flags,
            u64::from(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS)
        );
    }

    /// Without a server the API pointers are empty: the same path as a server older than
    /// 7.0, which must load the commands without docs rather than fail.
    #[test]
    fn no_api_means_no_docs_and_no_failure() {
        for command in COMMANDS {
            assert_eq!(describe(ptr::null_mut(), command), Outcome::NoApi);
        }
    }
}
