//! The module's cluster messages written by hand (the format of src/cluster/wire.rs), for the
//! tests that forge them and send them with RL.DEBUG.CLUSTERMSG: `RLP\x01`, a kind byte, the
//! body, and the FNV-1a 64 of everything before it, little-endian.

use std::time::{SystemTime, UNIX_EPOCH};

/// The FNV-1a 64 of the module's messages.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A message of `kind` with `body`, checksummed as the module writes one.
pub fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = b"RLP\x01".to_vec();
    out.push(kind);
    out.extend_from_slice(body);
    let sum = fnv(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// PULL: "send me your whole table".
pub fn pull_message() -> Vec<u8> {
    message(2, &[])
}

/// DIGEST of a table with `digest`, `live` policies, no tombstones, clock `clock`; with
/// `flags` (bit 0: the sender has caught up), or without (the form of the module before
/// flags, which the module reads as from a node that has caught up).
pub fn digest_message(digest: u64, live: u32, clock: u64, flags: Option<u8>) -> Vec<u8> {
    let mut body = digest.to_le_bytes().to_vec();
    body.extend_from_slice(&live.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&clock.to_le_bytes());
    body.extend(flags);
    message(1, &body)
}

/// What a forged change says of its name.
pub enum Content<'a> {
    Words(&'a [&'a str]),
    /// A deletion, at this time (ms since the Unix epoch).
    Tombstone(u64),
}

/// One change of a forged CHANGES message: `name`, its version (`clock`, `node`), its content.
pub struct Forged<'a> {
    pub name: String,
    pub clock: u64,
    pub node: &'a str,
    pub content: Content<'a>,
}

impl<'a> Forged<'a> {
    /// The policy `name` with `words`.
    pub fn live(name: &str, clock: u64, node: &'a str, words: &'a [&'a str]) -> Forged<'a> {
        Forged {
            name: name.to_string(),
            clock,
            node,
            content: Content::Words(words),
        }
    }
}

/// A CHANGES message carrying `changes`.
pub fn changes_message(changes: &[Forged]) -> Vec<u8> {
    let mut body = (changes.len() as u32).to_le_bytes().to_vec();
    for c in changes {
        body.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
        body.extend_from_slice(c.name.as_bytes());
        body.extend_from_slice(&c.clock.to_le_bytes());
        body.extend_from_slice(c.node.as_bytes());
        match &c.content {
            Content::Words(words) => {
                body.push(0);
                body.push(words.len() as u8);
                for w in *words {
                    body.extend_from_slice(&(w.len() as u16).to_le_bytes());
                    body.extend_from_slice(w.as_bytes());
                }
            }
            Content::Tombstone(at_ms) => {
                body.push(1);
                body.extend_from_slice(&at_ms.to_le_bytes());
            }
        }
    }
    message(3, &body)
}

/// The wall clock in ms since the Unix epoch, as the servers on this machine read it.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}
