//! Wire format of MQTT 5 properties (5.0 §2.2.2): reading with the per-packet rules, length
//! computation and writing.
//!
//! A property list is a Variable Byte Integer length followed by that many bytes of
//! `identifier, value` pairs. The rules checked on reading:
//! - an identifier this codec does not know: Malformed (5.0 §2.2.2.2 lists them all);
//! - an identifier not allowed in this packet (or in will properties): Protocol Error;
//! - any property but User Property, or Subscription Identifier in PUBLISH, twice: Protocol
//!   Error (each property's section says "It is a Protocol Error to include ... more than once");
//! - the value rules each property's section states (zero or non-boolean values): Protocol Error.

use bytes::BufMut;

use crate::cursor::{check_string, put_prefixed, put_vbi, vbi_len, Cursor, MAX_VBI};
use crate::topic::validate_topic_name;
use crate::{DecodeError, Properties};

/// Where a property list sits, which decides the properties allowed in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PropCtx {
    Connect,
    ConnAck,
    Publish,
    /// PUBACK, PUBREC, PUBREL and PUBCOMP.
    PubAck,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
    /// The will properties in a CONNECT payload (5.0 §3.1.3.2).
    Will,
}

const PAYLOAD_FORMAT_INDICATOR: u32 = 0x01;
const MESSAGE_EXPIRY_INTERVAL: u32 = 0x02;
const CONTENT_TYPE: u32 = 0x03;
const RESPONSE_TOPIC: u32 = 0x08;
const CORRELATION_DATA: u32 = 0x09;
const SUBSCRIPTION_IDENTIFIER: u32 = 0x0B;
const SESSION_EXPIRY_INTERVAL: u32 = 0x11;
const ASSIGNED_CLIENT_IDENTIFIER: u32 = 0x12;
const SERVER_KEEP_ALIVE: u32 = 0x13;
const AUTHENTICATION_METHOD: u32 = 0x15;
const AUTHENTICATION_DATA: u32 = 0x16;
const REQUEST_PROBLEM_INFORMATION: u32 = 0x17;
const WILL_DELAY_INTERVAL: u32 = 0x18;
const REQUEST_RESPONSE_INFORMATION: u32 = 0x19;
const RESPONSE_INFORMATION: u32 = 0x1A;
const SERVER_REFERENCE: u32 = 0x1C;
const REASON_STRING: u32 = 0x1F;
const RECEIVE_MAXIMUM: u32 = 0x21;
const TOPIC_ALIAS_MAXIMUM: u32 = 0x22;
const TOPIC_ALIAS: u32 = 0x23;
const MAXIMUM_QOS: u32 = 0x24;
const RETAIN_AVAILABLE: u32 = 0x25;
const USER_PROPERTY: u32 = 0x26;
const MAXIMUM_PACKET_SIZE: u32 = 0x27;
const WILDCARD_SUBSCRIPTION_AVAILABLE: u32 = 0x28;
const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u32 = 0x29;
const SHARED_SUBSCRIPTION_AVAILABLE: u32 = 0x2A;

/// Whether property `id` may appear in `ctx`, per the table in 5.0 §2.2.2.2. `None` for an
/// identifier that is not a property at all.
fn allowed(id: u32, ctx: PropCtx) -> Option<bool> {
    use PropCtx::*;
    Some(match id {
        PAYLOAD_FORMAT_INDICATOR
        | MESSAGE_EXPIRY_INTERVAL
        | CONTENT_TYPE
        | RESPONSE_TOPIC
        | CORRELATION_DATA => matches!(ctx, Publish | Will),
        SUBSCRIPTION_IDENTIFIER => matches!(ctx, Publish | Subscribe),
        SESSION_EXPIRY_INTERVAL => matches!(ctx, Connect | ConnAck | Disconnect),
        ASSIGNED_CLIENT_IDENTIFIER
        | SERVER_KEEP_ALIVE
        | RESPONSE_INFORMATION
        | MAXIMUM_QOS
        | RETAIN_AVAILABLE
        | WILDCARD_SUBSCRIPTION_AVAILABLE
        | SUBSCRIPTION_IDENTIFIER_AVAILABLE
        | SHARED_SUBSCRIPTION_AVAILABLE => ctx == ConnAck,
        AUTHENTICATION_METHOD | AUTHENTICATION_DATA => matches!(ctx, Connect | ConnAck | Auth),
        REQUEST_PROBLEM_INFORMATION | REQUEST_RESPONSE_INFORMATION => ctx == Connect,
        WILL_DELAY_INTERVAL => ctx == Will,
        SERVER_REFERENCE => matches!(ctx, ConnAck | Disconnect),
        REASON_STRING => {
            matches!(
                ctx,
                ConnAck | PubAck | SubAck | UnsubAck | Disconnect | Auth
            )
        }
        RECEIVE_MAXIMUM | TOPIC_ALIAS_MAXIMUM | MAXIMUM_PACKET_SIZE => {
            matches!(ctx, Connect | ConnAck)
        }
        TOPIC_ALIAS => ctx == Publish,
        USER_PROPERTY => true,
        _ => return None,
    })
}

/// A byte property that the specification restricts to 0 or 1 (e.g. 5.0 §3.3.2.3.2 "It is a
/// Protocol Error to include a value other than 0 or 1").
fn boolean(c: &mut Cursor, what: &'static str) -> Result<u8, DecodeError> {
    match c.u8()? {
        v @ (0 | 1) => Ok(v),
        _ => Err(DecodeError::Protocol(what)),
    }
}

fn non_zero_u16(c: &mut Cursor, what: &'static str) -> Result<u16, DecodeError> {
    match c.u16()? {
        0 => Err(DecodeError::Protocol(what)),
        v => Ok(v),
    }
}

/// Reads a property list (its length first) at the cursor.
pub(crate) fn read_properties(c: &mut Cursor, ctx: PropCtx) -> Result<Properties, DecodeError> {
    let len = c.vbi()?;
    let mut c = c.sub(len as usize)?;
    let mut p = Properties::default();
    // Identifiers are all below 64, so one bit each records which were seen.
    let mut seen: u64 = 0;
    while !c.is_empty() {
        // The identifier is a Variable Byte Integer (5.0 §2.2.2.2), though all fit one byte.
        let id = c.vbi()?;
        match allowed(id, ctx) {
            None => return Err(DecodeError::Malformed("unknown property identifier")),
            Some(false) => {
                return Err(DecodeError::Protocol("property not allowed in this packet"))
            }
            Some(true) => {}
        }
        let repeatable =
            id == USER_PROPERTY || (id == SUBSCRIPTION_IDENTIFIER && ctx == PropCtx::Publish);
        let bit = 1u64 << id; // id <= 0x2A here
        if seen & bit != 0 && !repeatable {
            return Err(DecodeError::Protocol("property included more than once"));
        }
        seen |= bit;
        match id {
            PAYLOAD_FORMAT_INDICATOR => {
                p.payload_format_indicator =
                    Some(boolean(&mut c, "payload format indicator not 0 or 1")?)
            }
            MESSAGE_EXPIRY_INTERVAL => p.message_expiry_interval = Some(c.u32()?),
            CONTENT_TYPE => p.content_type = Some(c.string()?),
            RESPONSE_TOPIC => {
                // [MQTT-3.3.2-14] The Response Topic MUST NOT contain wildcard characters.
                let topic = c.string()?;
                validate_topic_name(&topic)?;
                p.response_topic = Some(topic);
            }
            CORRELATION_DATA => p.correlation_data = Some(c.binary()?),
            SUBSCRIPTION_IDENTIFIER => {
                // 5.0 §3.3.2.3.8: "It is a Protocol Error if the Subscription Identifier has
                // a value of 0."
                let v = c.vbi()?;
                if v == 0 {
                    return Err(DecodeError::Protocol("subscription identifier 0"));
                }
                p.subscription_identifiers.push(v);
            }
            SESSION_EXPIRY_INTERVAL => p.session_expiry_interval = Some(c.u32()?),
            ASSIGNED_CLIENT_IDENTIFIER => p.assigned_client_identifier = Some(c.string()?),
            SERVER_KEEP_ALIVE => p.server_keep_alive = Some(c.u16()?),
            AUTHENTICATION_METHOD => p.authentication_method = Some(c.string()?),
            AUTHENTICATION_DATA => p.authentication_data = Some(c.binary()?),
            REQUEST_PROBLEM_INFORMATION => {
                p.request_problem_information =
                    Some(boolean(&mut c, "request problem information not 0 or 1")?)
            }
            WILL_DELAY_INTERVAL => p.will_delay_interval = Some(c.u32()?),
            REQUEST_RESPONSE_INFORMATION => {
                p.request_response_information =
                    Some(boolean(&mut c, "request response information not 0 or 1")?)
            }
            RESPONSE_INFORMATION => p.response_information = Some(c.string()?),
            SERVER_REFERENCE => p.server_reference = Some(c.string()?),
            REASON_STRING => p.reason_string = Some(c.string()?),
            // 5.0 §3.1.2.11.3 / §3.2.2.3.3: "It is a Protocol Error ... to have the value 0."
            RECEIVE_MAXIMUM => p.receive_maximum = Some(non_zero_u16(&mut c, "receive maximum 0")?),
            TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(c.u16()?),
            // 5.0 §3.3.2.3.4: "A Topic Alias of 0 is not permitted."
            TOPIC_ALIAS => p.topic_alias = Some(non_zero_u16(&mut c, "topic alias 0")?),
            MAXIMUM_QOS => p.maximum_qos = Some(boolean(&mut c, "maximum QoS not 0 or 1")?),
            RETAIN_AVAILABLE => {
                p.retain_available = Some(boolean(&mut c, "retain available not 0 or 1")?)
            }
            USER_PROPERTY => {
                let key = c.string()?;
                let value = c.string()?;
                p.user_properties.push((key, value));
            }
            MAXIMUM_PACKET_SIZE => {
                // 5.0 §3.1.2.11.4: "It is a Protocol Error to include ... the value zero."
                let v = c.u32()?;
                if v == 0 {
                    return Err(DecodeError::Protocol("maximum packet size 0"));
                }
                p.maximum_packet_size = Some(v);
            }
            WILDCARD_SUBSCRIPTION_AVAILABLE => {
                p.wildcard_subscription_available = Some(boolean(
                    &mut c,
                    "wildcard subscription available not 0 or 1",
                )?)
            }
            SUBSCRIPTION_IDENTIFIER_AVAILABLE => {
                p.subscription_identifier_available = Some(boolean(
                    &mut c,
                    "subscription identifier available not 0 or 1",
                )?)
            }
            SHARED_SUBSCRIPTION_AVAILABLE => {
                p.shared_subscription_available =
                    Some(boolean(&mut c, "shared subscription available not 0 or 1")?)
            }
            // `allowed` returned None for every other identifier.
            _ => return Err(DecodeError::Malformed("unknown property identifier")),
        }
    }
    Ok(p)
}

/// Length of the properties themselves, without the length prefix.
fn body_len(p: &Properties) -> usize {
    let string = |s: &Option<String>| s.as_ref().map_or(0, |s| 1 + 2 + s.len());
    let binary = |b: &Option<bytes::Bytes>| b.as_ref().map_or(0, |b| 1 + 2 + b.len());
    let fixed = |present: bool, n: usize| if present { 1 + n } else { 0 };
    fixed(p.payload_format_indicator.is_some(), 1)
        + fixed(p.message_expiry_interval.is_some(), 4)
        + string(&p.content_type)
        + string(&p.response_topic)
        + binary(&p.correlation_data)
        + p.subscription_identifiers
            .iter()
            .map(|&id| 1 + vbi_len(id as usize))
            .sum::<usize>()
        + fixed(p.session_expiry_interval.is_some(), 4)
        + string(&p.assigned_client_identifier)
        + fixed(p.server_keep_alive.is_some(), 2)
        + string(&p.authentication_method)
        + binary(&p.authentication_data)
        + fixed(p.request_problem_information.is_some(), 1)
        + fixed(p.will_delay_interval.is_some(), 4)
        + fixed(p.request_response_information.is_some(), 1)
        + string(&p.response_information)
        + string(&p.server_reference)
        + string(&p.reason_string)
        + fixed(p.receive_maximum.is_some(), 2)
        + fixed(p.topic_alias_maximum.is_some(), 2)
        + fixed(p.topic_alias.is_some(), 2)
        + fixed(p.maximum_qos.is_some(), 1)
        + fixed(p.retain_available.is_some(), 1)
        + p.user_properties
            .iter()
            .map(|(k, v)| 1 + 2 + k.len() + 2 + v.len())
            .sum::<usize>()
        + fixed(p.maximum_packet_size.is_some(), 4)
        + fixed(p.wildcard_subscription_available.is_some(), 1)
        + fixed(p.subscription_identifier_available.is_some(), 1)
        + fixed(p.shared_subscription_available.is_some(), 1)
}

/// Bytes a property list takes on the wire, length prefix included.
pub(crate) fn properties_len(p: &Properties) -> usize {
    let n = body_len(p);
    vbi_len(n) + n
}

/// Writes a property list, length prefix included, in identifier order.
pub(crate) fn put_properties<B: BufMut>(out: &mut B, p: &Properties) {
    put_vbi(out, body_len(p));
    // Identifiers below 128 are one-byte Variable Byte Integers.
    let id = |out: &mut B, id: u32| out.put_u8(id as u8);
    if let Some(v) = p.payload_format_indicator {
        id(out, PAYLOAD_FORMAT_INDICATOR);
        out.put_u8(v);
    }
    if let Some(v) = p.message_expiry_interval {
        id(out, MESSAGE_EXPIRY_INTERVAL);
        out.put_u32(v);
    }
    put_string(out, CONTENT_TYPE, &p.content_type);
    put_string(out, RESPONSE_TOPIC, &p.response_topic);
    put_binary(out, CORRELATION_DATA, &p.correlation_data);
    for &v in &p.subscription_identifiers {
        debug_assert!(
            v != 0 && v <= MAX_VBI,
            "subscription identifier {v} out of range"
        );
        id(out, SUBSCRIPTION_IDENTIFIER);
        put_vbi(out, v as usize);
    }
    if let Some(v) = p.session_expiry_interval {
        id(out, SESSION_EXPIRY_INTERVAL);
        out.put_u32(v);
    }
    put_string(
        out,
        ASSIGNED_CLIENT_IDENTIFIER,
        &p.assigned_client_identifier,
    );
    if let Some(v) = p.server_keep_alive {
        id(out, SERVER_KEEP_ALIVE);
        out.put_u16(v);
    }
    put_string(out, AUTHENTICATION_METHOD, &p.authentication_method);
    put_binary(out, AUTHENTICATION_DATA, &p.authentication_data);
    if let Some(v) = p.request_problem_information {
        id(out, REQUEST_PROBLEM_INFORMATION);
        out.put_u8(v);
    }
    if let Some(v) = p.will_delay_interval {
        id(out, WILL_DELAY_INTERVAL);
        out.put_u32(v);
    }
    if let Some(v) = p.request_response_information {
        id(out, REQUEST_RESPONSE_INFORMATION);
        out.put_u8(v);
    }
    put_string(out, RESPONSE_INFORMATION, &p.response_information);
    put_string(out, SERVER_REFERENCE, &p.server_reference);
    put_string(out, REASON_STRING, &p.reason_string);
    let u16s = [
        (RECEIVE_MAXIMUM, p.receive_maximum),
        (TOPIC_ALIAS_MAXIMUM, p.topic_alias_maximum),
        (TOPIC_ALIAS, p.topic_alias),
    ];
    for (i, v) in u16s {
        if let Some(v) = v {
            id(out, i);
            out.put_u16(v);
        }
    }
    for (i, v) in [
        (MAXIMUM_QOS, p.maximum_qos),
        (RETAIN_AVAILABLE, p.retain_available),
    ] {
        if let Some(v) = v {
            id(out, i);
            out.put_u8(v);
        }
    }
    for (k, v) in &p.user_properties {
        id(out, USER_PROPERTY);
        put_prefixed(out, k.as_bytes());
        put_prefixed(out, v.as_bytes());
    }
    if let Some(v) = p.maximum_packet_size {
        id(out, MAXIMUM_PACKET_SIZE);
        out.put_u32(v);
    }
    let flags = [
        (
            WILDCARD_SUBSCRIPTION_AVAILABLE,
            p.wildcard_subscription_available,
        ),
        (
            SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            p.subscription_identifier_available,
        ),
        (
            SHARED_SUBSCRIPTION_AVAILABLE,
            p.shared_subscription_available,
        ),
    ];
    for (i, v) in flags {
        if let Some(v) = v {
            id(out, i);
            out.put_u8(v);
        }
    }
}

fn put_string<B: BufMut>(out: &mut B, id: u32, s: &Option<String>) {
    if let Some(s) = s {
        debug_assert!(check_string(s).is_ok(), "string property contains U+0000");
        out.put_u8(id as u8);
        put_prefixed(out, s.as_bytes());
    }
}

fn put_binary<B: BufMut>(out: &mut B, id: u32, b: &Option<bytes::Bytes>) {
    if let Some(b) = b {
        out.put_u8(id as u8);
        put_prefixed(out, b);
    }
}

#[cfg(test)]
mod tests;
