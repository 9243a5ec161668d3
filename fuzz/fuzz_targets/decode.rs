//! Fuzzes the codec: `check` then, when a whole frame is there, `decode` under each protocol.
//! Whatever decodes must encode to exactly `encoded_len` bytes and decode back to itself.
#![no_main]

use ballast_codec::{check, decode, Protocol};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(header)) = check(data, 1 << 20) else {
        return;
    };
    let Some(frame) = data.get(..header.total_len()) else {
        return; // body incomplete
    };
    for protocol in [Protocol::V3_1, Protocol::V3_1_1, Protocol::V5] {
        let Ok(packet) = decode(Bytes::copy_from_slice(frame), protocol) else {
            continue;
        };
        let mut out = Vec::new();
        packet.encode(protocol, &mut out);
        assert_eq!(out.len(), packet.encoded_len(protocol), "encoded_len of {packet:?}");
        let again = decode(Bytes::from(out), protocol);
        assert_eq!(again.as_ref(), Ok(&packet), "round trip of {packet:?}");
    }
});
