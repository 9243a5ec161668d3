//! Keys and values as the embedded engine stores them.
//!
//! Keys sort the way the data is read back: a session's queue entries are contiguous and in
//! sequence order (`sid` then `seq`, big-endian). Values are a format version byte followed by
//! the record in postcard, so a later format can be told apart and a damaged value is reported
//! with its key instead of being misread.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::StoreError;

const VERSION: u8 = 1;

pub fn queue_key(sid: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&sid.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub fn incoming_key(sid: u64, packet_id: u16) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[..8].copy_from_slice(&sid.to_be_bytes());
    k[8..].copy_from_slice(&packet_id.to_be_bytes());
    k
}

/// Splits a queue key into (sid, seq).
pub fn parse_queue_key(k: &[u8]) -> Result<(u64, u64), StoreError> {
    let k: &[u8; 16] = k
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("queue key of {} bytes", k.len())))?;
    let sid = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
    let seq = u64::from_be_bytes(k[8..].try_into().expect("8 bytes"));
    Ok((sid, seq))
}

/// Splits an incoming-packet-id key into (sid, packet id).
pub fn parse_incoming_key(k: &[u8]) -> Result<(u64, u16), StoreError> {
    let k: &[u8; 10] = k
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("packet id key of {} bytes", k.len())))?;
    let sid = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
    let pid = u16::from_be_bytes(k[8..].try_into().expect("2 bytes"));
    Ok((sid, pid))
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = vec![VERSION];
    // Serialising our own plain records into a Vec cannot fail.
    out.extend(postcard::to_stdvec(v).expect("record serialises"));
    out
}

pub fn decode<T: DeserializeOwned>(what: &str, key: &[u8], v: &[u8]) -> Result<T, StoreError> {
    match v.split_first() {
        Some((&VERSION, rest)) => postcard::from_bytes(rest)
            .map_err(|e| StoreError::Corrupt(format!("{what} record {}: {e}", show_key(key)))),
        Some((other, _)) => Err(StoreError::Corrupt(format!(
            "{what} record {} has format version {other}, this build reads {VERSION}",
            show_key(key)
        ))),
        None => Err(StoreError::Corrupt(format!(
            "{what} record {} is empty",
            show_key(key)
        ))),
    }
}

fn show_key(k: &[u8]) -> String {
    match std::str::from_utf8(k) {
        Ok(s) if !s.chars().any(char::is_control) => format!("{s:?}"),
        _ => k.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoredSession;

    #[test]
    fn keys_sort_by_session_then_sequence() {
        assert!(queue_key(1, 300) < queue_key(2, 1));
        assert!(queue_key(1, 255) < queue_key(1, 256));
        assert_eq!(parse_queue_key(&queue_key(7, 9)).unwrap(), (7, 9));
        assert_eq!(
            parse_incoming_key(&incoming_key(7, 65535)).unwrap(),
            (7, 65535)
        );
        assert!(parse_queue_key(b"short").is_err());
    }

    #[test]
    fn damaged_values_are_reported_not_misread() {
        let s = StoredSession {
            client_id: "c".into(),
            sid: 1,
            expiry_secs: 5,
            disconnected_at_ms: None,
            subscriptions: vec![],
        };
        let mut v = encode(&s);
        assert_eq!(decode::<StoredSession>("session", b"c", &v).unwrap(), s);
        let e = decode::<StoredSession>("session", b"c", &v[..2]).unwrap_err();
        assert!(e.to_string().contains("session record \"c\""), "{e}");
        v[0] = 9;
        let e = decode::<StoredSession>("session", b"c", &v).unwrap_err();
        assert!(e.to_string().contains("format version 9"), "{e}");
        assert!(decode::<StoredSession>("session", b"c", &[]).is_err());
    }
}
