//! The lowering of a command's `COMMAND DOCS`/`COMMAND INFO` entry (its summary, its
//! arguments with their types, its key spec), as the syntax table (`args::syntax`) writes it
//! in plain Rust, to the raw structures `RedisModule_SetCommandInfo` takes.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;

use super::Ctx;
use crate::args::syntax::{Arg, KeyUse, Kind, Syntax};

/// The raw key-spec flags of a key use.
pub fn key_flags(key: KeyUse) -> u64 {
    let flags = match key {
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

/// The raw argument type of a kind.
fn arg_type(kind: Kind) -> raw::RedisModuleCommandArgType {
    match kind {
        Kind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        Kind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        Kind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        Kind::Token => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
        Kind::OneOf(_) => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        Kind::Block(_) => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
    }
}

/// The raw flags of an argument: optional, repeated.
fn arg_flags(arg: &Arg) -> c_int {
    let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
    if arg.optional {
        flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
    }
    if arg.multiple {
        flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
    }
    flags as c_int
}

/// Gives Redis the `COMMAND DOCS`/`COMMAND INFO` entry `doc` of the command `name`, with
/// `since` and `arity`. `None` when the server has no such API, else whether Redis accepted
/// it. Redis copies everything it is given (`RM_SetCommandInfo` duplicates every string and
/// array), so the raw structures built here live only for the call.
pub fn set_command_docs(
    ctx: Ctx<'_>,
    name: &CStr,
    doc: &Syntax,
    since: &'static CStr,
    arity: c_int,
) -> Option<bool> {
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
        since: since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity,
        key_specs: if doc.key == KeyUse::None {
            ptr::null_mut()
        } else {
            key_specs.as_mut_ptr()
        },
        args,
    };
    // SAFETY: every pointer in `info` points into `version`, `key_specs`, `keep` or static
    // strings, all alive until this call returns; Redis copies what it keeps.
    unsafe { super::command::set_command_info(ctx, name, &info) }
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
            key_flags(key),
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
            type_: arg_type(arg.kind),
            key_spec_index: if matches!(arg.kind, Kind::Key) { 0 } else { -1 },
            token: arg.token.map_or(ptr::null(), CStr::as_ptr),
            summary: arg.summary.as_ptr(),
            since: ptr::null(),
            flags: arg_flags(arg),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_arrays_end_with_a_zeroed_entry() {
        // RL.DEBUG.CLOCK's one argument is a group of three.
        let args = &[crate::args::syntax::CLOCK_CHANGE][..];
        let mut keep = Vec::new();
        let first = lower(args, &mut keep);
        assert_eq!(keep.len(), 2, "the group's own array, then the command's");
        let top = keep.last().unwrap();
        assert_eq!(top.as_ptr(), first as *const _);
        assert_eq!(top.len(), 2);
        assert!(top[1].name.is_null());
        let group = &keep[0];
        assert_eq!(top[0].subargs as *const _, group.as_ptr());
        assert_eq!(group.len(), 4);
        assert!(group[3].name.is_null());
        assert_eq!(group[2].type_, arg_type(Kind::Token));
        let specs = key_specs(KeyUse::Read);
        assert_eq!(specs[1].begin_search_type, 0);
        assert_eq!(
            specs[0].flags,
            u64::from(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS)
        );
    }
}
