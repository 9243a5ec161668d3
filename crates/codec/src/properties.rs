//! MQTT 5 properties.
//!
//! One struct holds every property; which of them a packet may carry is checked when decoding
//! (see `allowed` in property_codec.rs). A property left `None` (or an empty list) is not
//! encoded.

use bytes::Bytes;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Properties {
    /// 0x01
    pub payload_format_indicator: Option<u8>,
    /// 0x02, seconds
    pub message_expiry_interval: Option<u32>,
    /// 0x03
    pub content_type: Option<String>,
    /// 0x08
    pub response_topic: Option<String>,
    /// 0x09
    pub correlation_data: Option<Bytes>,
    /// 0x0B: one in SUBSCRIBE; any number in PUBLISH (server to client). Never 0.
    pub subscription_identifiers: Vec<u32>,
    /// 0x11, seconds
    pub session_expiry_interval: Option<u32>,
    /// 0x12
    pub assigned_client_identifier: Option<String>,
    /// 0x13, seconds
    pub server_keep_alive: Option<u16>,
    /// 0x15
    pub authentication_method: Option<String>,
    /// 0x16
    pub authentication_data: Option<Bytes>,
    /// 0x17
    pub request_problem_information: Option<u8>,
    /// 0x18, seconds
    pub will_delay_interval: Option<u32>,
    /// 0x19
    pub request_response_information: Option<u8>,
    /// 0x1A
    pub response_information: Option<String>,
    /// 0x1C
    pub server_reference: Option<String>,
    /// 0x1F
    pub reason_string: Option<String>,
    /// 0x21, never 0
    pub receive_maximum: Option<u16>,
    /// 0x22
    pub topic_alias_maximum: Option<u16>,
    /// 0x23, never 0
    pub topic_alias: Option<u16>,
    /// 0x24, 0 or 1
    pub maximum_qos: Option<u8>,
    /// 0x25, 0 or 1
    pub retain_available: Option<u8>,
    /// 0x26, in order, repeats allowed
    pub user_properties: Vec<(String, String)>,
    /// 0x27, never 0
    pub maximum_packet_size: Option<u32>,
    /// 0x28, 0 or 1
    pub wildcard_subscription_available: Option<u8>,
    /// 0x29, 0 or 1
    pub subscription_identifier_available: Option<u8>,
    /// 0x2A, 0 or 1
    pub shared_subscription_available: Option<u8>,
}

impl Properties {
    pub fn is_empty(&self) -> bool {
        *self == Properties::default()
    }
}
