//! The cluster bus: the module's own messages between the nodes of a Redis Cluster, and who
//! the nodes are. A handler of [`ClusterReceiver`] runs behind an `extern "C"` trampoline here
//! (as a timer does, see `events.rs`), with the sender's id and the payload as plain bytes.
//!
//! Node ids are 40 bytes. Redis hands the sender's id and the node list's ids as exactly that
//! (not NUL-terminated), and looks a target id up as a C string: the ids sent are copied into
//! a NUL-terminated buffer first.

use std::os::raw::{c_char, c_uchar};
use std::panic::catch_unwind;
use std::slice;

use redis_module::raw;

use super::Ctx;

/// A node id: 40 bytes (hex characters on every server).
pub const NODE_ID_LEN: usize = raw::REDISMODULE_NODE_ID_LEN as usize;

/// What handles the module's messages of one type (see [`Ctx::receive_cluster_messages`]).
pub trait ClusterReceiver {
    /// The message type (the module API's `uint8_t type`).
    const TYPE: u8;

    /// Runs on the main thread for each message of [`Self::TYPE`]: `sender` the sending
    /// node's id, `payload` its bytes, untrusted. A panic is caught and ends the call.
    fn received(ctx: Ctx<'_>, sender: &[u8; NODE_ID_LEN], payload: &[u8]);
}

/// A NUL-terminated copy of a node id, as the lookups by id take it.
fn c_id(id: &[u8; NODE_ID_LEN]) -> [c_char; NODE_ID_LEN + 1] {
    let mut out = [0 as c_char; NODE_ID_LEN + 1];
    for (o, &b) in out.iter_mut().zip(id) {
        *o = b as c_char;
    }
    out
}

impl Ctx<'_> {
    /// Whether the server runs as a node of a Redis Cluster.
    pub fn cluster_mode(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// Whether the server is a primary (not a replica).
    pub fn is_primary(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
    }

    /// Registers `R` for its message type; whether the server has the API.
    pub fn receive_cluster_messages<R: ClusterReceiver>(self) -> bool {
        // SAFETY: a live context; the callback is a `'static` function.
        unsafe {
            raw::RedisModule_RegisterClusterMessageReceiver.is_some_and(|register| {
                register(self.raw(), R::TYPE, Some(receiver_callback::<R>));
                true
            })
        }
    }

    /// Sends `payload` as a message of `kind` to the node `target`, or to every node when it
    /// is None; whether the server took it (a target it does not know, or no cluster: not).
    pub fn send_cluster_message(
        self,
        target: Option<&[u8; NODE_ID_LEN]>,
        kind: u8,
        payload: &[u8],
    ) -> bool {
        let Ok(len) = u32::try_from(payload.len()) else {
            return false;
        };
        let id = target.map(c_id);
        let target_ptr = id.as_ref().map_or(std::ptr::null(), |id| id.as_ptr());
        // SAFETY: a live context; the target (if any) is NUL-terminated and the payload is
        // `len` readable bytes, both only read during the call.
        unsafe {
            raw::RedisModule_SendClusterMessage.is_some_and(|send| {
                send(
                    self.raw(),
                    target_ptr,
                    kind,
                    payload.as_ptr().cast::<c_char>(),
                    len,
                ) == raw::REDISMODULE_OK as i32
            })
        }
    }

    /// The ids of the cluster's nodes, this one included (empty outside a cluster).
    pub fn cluster_nodes(self) -> Vec<[u8; NODE_ID_LEN]> {
        let mut count: usize = 0;
        // SAFETY: a live context; Redis returns `count` pointers to ids of NODE_ID_LEN bytes
        // (or null), which are copied out and then freed with the list, as the API says.
        unsafe {
            let (Some(list), Some(free)) = (
                raw::RedisModule_GetClusterNodesList,
                raw::RedisModule_FreeClusterNodesList,
            ) else {
                return Vec::new();
            };
            let ids = list(self.raw(), &mut count);
            if ids.is_null() {
                return Vec::new();
            }
            let mut out = Vec::with_capacity(count);
            for &id in slice::from_raw_parts(ids, count) {
                if id.is_null() {
                    continue;
                }
                let bytes = slice::from_raw_parts(id.cast::<u8>(), NODE_ID_LEN);
                let mut node = [0u8; NODE_ID_LEN];
                node.copy_from_slice(bytes);
                out.push(node);
            }
            free(ids);
            out
        }
    }

    /// Whether `id` is a node this one knows.
    pub fn knows_cluster_node(self, id: &[u8; NODE_ID_LEN]) -> bool {
        self.cluster_node_flags(id).is_some()
    }

    /// Whether `id` is a node this one knows and does not take for failing (`PFAIL` or
    /// `FAIL`): one that can be expected to answer.
    pub fn cluster_node_reachable(self, id: &[u8; NODE_ID_LEN]) -> bool {
        self.cluster_node_flags(id).is_some_and(|flags| {
            flags & (raw::REDISMODULE_NODE_PFAIL | raw::REDISMODULE_NODE_FAIL) as i32 == 0
        })
    }

    /// The flags of the node `id` (`REDISMODULE_NODE_*`), or None when this node does not
    /// know it.
    fn cluster_node_flags(self, id: &[u8; NODE_ID_LEN]) -> Option<i32> {
        let id = c_id(id);
        let mut flags: i32 = 0;
        // SAFETY: a live context; the id is NUL-terminated; the other out-pointers may be
        // null, and `flags` is written during the call only.
        unsafe {
            let info = raw::RedisModule_GetClusterNodeInfo?;
            (info(
                self.raw(),
                id.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut flags,
            ) == raw::REDISMODULE_OK as i32)
                .then_some(flags)
        }
    }
}

/// This node's id in the cluster, or None outside one.
pub fn my_cluster_id() -> Option<[u8; NODE_ID_LEN]> {
    // SAFETY: Redis returns its own node's name, NODE_ID_LEN bytes that live as long as the
    // server (or null outside a cluster); they are copied at once.
    unsafe {
        let get = raw::RedisModule_GetMyClusterID?;
        let id = get();
        if id.is_null() {
            return None;
        }
        let mut node = [0u8; NODE_ID_LEN];
        node.copy_from_slice(slice::from_raw_parts(id.cast::<u8>(), NODE_ID_LEN));
        Some(node)
    }
}

/// The `extern "C"` function of the receiver `R` (registered by
/// [`Ctx::receive_cluster_messages`]).
extern "C" fn receiver_callback<R: ClusterReceiver>(
    ctx: *mut raw::RedisModuleCtx,
    sender: *const c_char,
    _kind: u8,
    payload: *const c_uchar,
    len: u32,
) {
    // SAFETY: Redis calls a receiver with a live context, the sender's id (NODE_ID_LEN
    // bytes) and `len` bytes of payload, all valid until it returns; they are only read, and
    // the context does not escape `R::received`.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return;
    };
    if sender.is_null() {
        return;
    }
    let mut id = [0u8; NODE_ID_LEN];
    // SAFETY: as above.
    id.copy_from_slice(unsafe { slice::from_raw_parts(sender.cast::<u8>(), NODE_ID_LEN) });
    let payload: &[u8] = if payload.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: as above.
        unsafe { slice::from_raw_parts(payload, len as usize) }
    };
    let _ = catch_unwind(|| R::received(ctx, &id, payload));
}
