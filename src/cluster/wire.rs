//! The bytes of the module's cluster messages: what one node tells another about its
//! policies table. Pure: encoding and a decoder that treats every payload as untrusted (any
//! node, or anyone who reaches the bus port, can send one): every length is checked against
//! what is left and against a bound, and anything else is an error that says what is wrong,
//! never a panic.
//!
//! Every message is `RLP` and a format byte (1), a kind byte, the body, and the FNV-1a 64 of
//! everything before it (8 bytes, little-endian), so that a damaged payload is refused
//! whole. Integers are little-endian.
//!
//! - `DIGEST` (1): the sender's table digest (u64), its live policies and tombstones (u32
//!   each), its clock (u64) and flags (u8; bit 0: the sender has caught up with the
//!   cluster's policies): sent once a period to one other node (to every other node while
//!   the sender has not caught up). A DIGEST without the flags byte (the module before it)
//!   is taken as from a node that has caught up.
//! - `PULL` (2): no body: "send me your whole table".
//! - `CHANGES` (3): a count (u32), then per name: the name (u16 length, bytes), the version
//!   (clock u64, node id 40 bytes), and either `0` and the policy's words (u8 count, each a
//!   u16 length and bytes) or `1` and the tombstone's deletion time (u64 ms).

use crate::storage::policies::{Fnv, NodeId, Version, NODE_ID_LEN};

const MAGIC: &[u8; 4] = b"RLP\x01";
const CHECKSUM: usize = 8;

/// The longest policy name, as RL.POLICY.SET takes it.
pub const MAX_NAME: usize = crate::storage::policies::MAX_NAME;
/// The most words a policy has (five a rule at most, 16 rules).
pub const MAX_WORDS: usize = 5 * algorithms::rule_set::MAX_RULES;
/// The longest word sent (a rule's word is a number, a duration or a name).
pub const MAX_WORD: usize = 64;
/// The most names one CHANGES message carries; a table is sent as several messages.
pub const MAX_CHANGES: usize = 256;

/// What a message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Digest(Summary),
    Pull,
    Changes(Vec<Change>),
}

/// A table's digest, sizes and clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub digest: u64,
    pub live: u32,
    pub tombstones: u32,
    pub clock: u64,
    /// Whether the sender has caught up with the cluster's policies since it started.
    pub caught_up: bool,
}

/// One name's latest change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub name: Vec<u8>,
    pub version: Version,
    pub content: Content,
}

/// A change's content: a policy's words, or a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Words(Vec<Vec<u8>>),
    Tombstone { deleted_at_ms: u64 },
}

const DIGEST: u8 = 1;
const PULL: u8 = 2;
const CHANGES: u8 = 3;

/// The payload of `message`.
pub fn encode(message: &Message) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    match message {
        Message::Digest(s) => {
            out.push(DIGEST);
            out.extend_from_slice(&s.digest.to_le_bytes());
            out.extend_from_slice(&s.live.to_le_bytes());
            out.extend_from_slice(&s.tombstones.to_le_bytes());
            out.extend_from_slice(&s.clock.to_le_bytes());
            out.push(u8::from(s.caught_up));
        }
        Message::Pull => out.push(PULL),
        Message::Changes(changes) => {
            out.push(CHANGES);
            out.extend_from_slice(&(changes.len() as u32).to_le_bytes());
            for c in changes {
                out.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
                out.extend_from_slice(&c.name);
                out.extend_from_slice(&c.version.clock.to_le_bytes());
                out.extend_from_slice(&c.version.node);
                match &c.content {
                    Content::Words(words) => {
                        out.push(0);
                        out.push(words.len() as u8);
                        for w in words {
                            out.extend_from_slice(&(w.len() as u16).to_le_bytes());
                            out.extend_from_slice(w);
                        }
                    }
                    Content::Tombstone { deleted_at_ms } => {
                        out.push(1);
                        out.extend_from_slice(&deleted_at_ms.to_le_bytes());
                    }
                }
            }
        }
    }
    let sum = Fnv::new().bytes(&out).finish();
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A reader over the body: each read checks what is left.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.bytes.len() < n {
            return Err("cut short");
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<usize, &'static str> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_le_bytes([b[0], b[1]])))
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

/// Whether `id` looks like a node id: 40 lower-case hex characters (the standalone id, all
/// `0`, is one too).
pub fn is_node_id(id: &[u8]) -> bool {
    id.len() == NODE_ID_LEN
        && id
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The message in `payload`, or what is wrong with it.
pub fn decode(payload: &[u8]) -> Result<Message, &'static str> {
    if payload.len() < MAGIC.len() + 1 + CHECKSUM {
        return Err("too short to be a message");
    }
    if &payload[..MAGIC.len()] != MAGIC {
        return Err("not a message of this module's format");
    }
    let (signed, sum) = payload.split_at(payload.len() - CHECKSUM);
    let mut expected = [0u8; CHECKSUM];
    expected.copy_from_slice(sum);
    if Fnv::new().bytes(signed).finish() != u64::from_le_bytes(expected) {
        return Err("checksum mismatch (damaged)");
    }
    let mut r = Reader {
        bytes: &signed[MAGIC.len()..],
    };
    let message = match r.u8()? {
        DIGEST => Message::Digest(Summary {
            digest: r.u64()?,
            live: r.u32()?,
            tombstones: r.u32()?,
            clock: r.u64()?,
            caught_up: match r.bytes {
                [] => true,
                _ => r.u8()? & 1 == 1,
            },
        }),
        PULL => Message::Pull,
        CHANGES => {
            let count = r.u32()? as usize;
            if count > MAX_CHANGES {
                return Err("more changes than a message carries");
            }
            let mut changes = Vec::with_capacity(count);
            for _ in 0..count {
                changes.push(change(&mut r)?);
            }
            Message::Changes(changes)
        }
        _ => return Err("an unknown kind of message"),
    };
    if !r.bytes.is_empty() {
        return Err("bytes after the message");
    }
    Ok(message)
}

fn change(r: &mut Reader) -> Result<Change, &'static str> {
    let len = r.u16()?;
    if !(1..=MAX_NAME).contains(&len) {
        return Err("a policy name of no or too many bytes");
    }
    let name = r.take(len)?.to_vec();
    let clock = r.u64()?;
    let node_bytes = r.take(NODE_ID_LEN)?;
    if !is_node_id(node_bytes) {
        return Err("a version whose node id is not 40 hex characters");
    }
    let mut node: NodeId = [0; NODE_ID_LEN];
    node.copy_from_slice(node_bytes);
    let content = match r.u8()? {
        0 => {
            let n = usize::from(r.u8()?);
            if !(2..=MAX_WORDS).contains(&n) {
                return Err("a policy of no rules or of more words than its rules can have");
            }
            let mut words = Vec::with_capacity(n);
            for _ in 0..n {
                let len = r.u16()?;
                if !(1..=MAX_WORD).contains(&len) {
                    return Err("a rule word of no or too many bytes");
                }
                words.push(r.take(len)?.to_vec());
            }
            Content::Words(words)
        }
        1 => Content::Tombstone {
            deleted_at_ms: r.u64()?,
        },
        _ => return Err("a change that is neither a policy nor a tombstone"),
    };
    Ok(Change {
        name,
        version: Version { clock, node },
        content,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(c: u8) -> NodeId {
        [c; NODE_ID_LEN]
    }

    fn samples() -> Vec<Message> {
        vec![
            Message::Digest(Summary {
                digest: 0x0123_4567_89ab_cdef,
                live: 3,
                tombstones: 1,
                clock: 99,
                caught_up: false,
            }),
            Message::Digest(Summary {
                digest: 1,
                live: 0,
                tombstones: 0,
                clock: u64::MAX,
                caught_up: true,
            }),
            Message::Pull,
            Message::Changes(vec![]),
            Message::Changes(vec![
                Change {
                    name: b"api".to_vec(),
                    version: Version {
                        clock: 7,
                        node: node(b'a'),
                    },
                    content: Content::Words(
                        ["GCRA", "10", "10", "1s", "FIXEDWINDOW", "5000", "1d"]
                            .iter()
                            .map(|w| w.as_bytes().to_vec())
                            .collect(),
                    ),
                },
                Change {
                    name: vec![b'x'; MAX_NAME],
                    version: Version {
                        clock: u64::MAX,
                        node: node(b'0'),
                    },
                    content: Content::Tombstone {
                        deleted_at_ms: 1_700_000_000_000,
                    },
                },
            ]),
        ]
    }

    #[test]
    fn every_message_reads_back_as_it_was_written() {
        for m in samples() {
            assert_eq!(decode(&encode(&m)), Ok(m));
        }
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_refused_without_a_panic() {
        for m in samples() {
            let bytes = encode(&m);
            for cut in 0..bytes.len() {
                assert!(decode(&bytes[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            for i in 0..bytes.len() {
                for bit in 0..8 {
                    let mut damaged = bytes.clone();
                    damaged[i] ^= 1 << bit;
                    assert!(decode(&damaged).is_err(), "{m:?} byte {i} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn a_digest_of_the_module_before_flags_reads_as_from_a_node_caught_up() {
        let summary = Summary {
            digest: 7,
            live: 1,
            tombstones: 2,
            clock: 3,
            caught_up: false,
        };
        let mut old = encode(&Message::Digest(summary));
        // Drop the flags byte, and sign again as the module before it did.
        old.truncate(old.len() - CHECKSUM - 1);
        let sum = Fnv::new().bytes(&old).finish();
        old.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(old.len(), 37);
        assert_eq!(
            decode(&old),
            Ok(Message::Digest(Summary {
                caught_up: true,
                ..summary
            }))
        );
    }

    /// A forged message with a valid checksum: each bound is checked on its own.
    #[test]
    fn a_well_formed_message_out_of_bounds_says_what_is_wrong() {
        let signed = |body: &[u8]| {
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(body);
            let sum = Fnv::new().bytes(&out).finish();
            out.extend_from_slice(&sum.to_le_bytes());
            out
        };
        let mut change = vec![CHANGES, 1, 0, 0, 0, 1, 0, b'p'];
        change.extend_from_slice(&5u64.to_le_bytes());
        let good_node = [b'a'; NODE_ID_LEN];
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![9], "an unknown kind of message"),
            (vec![PULL, 0], "bytes after the message"),
            (
                [&[CHANGES][..], &(MAX_CHANGES as u32 + 1).to_le_bytes()].concat(),
                "more changes than a message carries",
            ),
            (
                [&[CHANGES, 1, 0, 0, 0, 0, 0][..]].concat(),
                "a policy name of no or too many bytes",
            ),
            (
                [&change[..], &[b'A'; NODE_ID_LEN]].concat(),
                "a version whose node id is not 40 hex characters",
            ),
            (
                [&change[..], &good_node, &[2]].concat(),
                "a change that is neither a policy nor a tombstone",
            ),
            (
                [&change[..], &good_node, &[0, 1, 1, 0, b'G']].concat(),
                "a policy of no rules or of more words than its rules can have",
            ),
            (
                [&change[..], &good_node, &[0, 2, 0, 0]].concat(),
                "a rule word of no or too many bytes",
            ),
            (
                [&change[..], &good_node, &[0, 2, 200, 0]].concat(),
                "a rule word of no or too many bytes",
            ),
        ];
        for (body, why) in cases {
            assert_eq!(decode(&signed(&body)), Err(why), "{body:?}");
        }
        assert_eq!(
            decode(b"XXXX\x01\x02\x03\x04\x05\x06\x07\x08\x09"),
            Err("not a message of this module's format")
        );
    }

    #[test]
    fn node_ids_are_forty_lower_case_hex_characters() {
        assert!(is_node_id(&[b'0'; 40]));
        assert!(is_node_id(b"07c37dfeb235213a872192d90877d0cd55635b91"));
        assert!(!is_node_id(b"07C37DFEB235213A872192D90877D0CD55635B91"));
        assert!(!is_node_id(&[b'0'; 39]));
        assert!(!is_node_id(&[b'g'; 40]));
    }
}
