//! MQTT 3.1, 3.1.1 and 5.0 packets.
//!
//! The wire format in one crate with no I/O: [`check`] reads a fixed header and tells how many
//! bytes a packet needs (so a caller can refuse an oversized packet before buffering it),
//! [`decode`] turns exactly one complete packet into a [`Packet`], and [`Packet::encode`]
//! writes one back. Decoding validates everything the specifications require of a receiver
//! (reserved flags, remaining-length form, UTF-8 rules, topic rules, duplicate properties,
//! properties allowed per packet, packet id zero) and never panics on any input; errors carry
//! the MQTT 5 reason code a server answers with.
//!
//! Payloads and binary data borrow from the input [`bytes::Bytes`] rather than being copied.

mod cursor;
mod decode;
mod encode;
mod error;
mod packet;
mod properties;
mod property_codec;
pub mod topic;

pub use decode::{check, decode, FrameHeader};
pub use error::{DecodeError, ReasonCode};
pub use packet::*;
pub use properties::Properties;

/// Largest value the remaining-length field can hold (four bytes of seven bits each).
pub const MAX_REMAINING_LENGTH: usize = 268_435_455;
