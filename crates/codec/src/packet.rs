//! The packet types: one struct per MQTT control packet.

use bytes::Bytes;

use crate::Properties;

/// Protocol level from the CONNECT packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// MQTT 3.1, protocol name "MQIsdp", level 3.
    V3_1,
    /// MQTT 3.1.1, protocol name "MQTT", level 4.
    V3_1_1,
    /// MQTT 5.0, protocol name "MQTT", level 5.
    V5,
}

impl Protocol {
    pub fn level(self) -> u8 {
        match self {
            Protocol::V3_1 => 3,
            Protocol::V3_1_1 => 4,
            Protocol::V5 => 5,
        }
    }

    pub fn is_v5(self) -> bool {
        self == Protocol::V5
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum QoS {
    #[default]
    AtMostOnce = 0,
    AtLeastOnce = 1,
    ExactlyOnce = 2,
}

impl QoS {
    pub fn from_u8(v: u8) -> Option<QoS> {
        match v {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

// CONNECT (two property lists) is about twice the size of the other variants; boxing it
// would change the public shape for a packet sent once per connection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    Connect(Connect),
    ConnAck(ConnAck),
    Publish(Publish),
    PubAck(PubAck),
    PubRec(PubAck),
    PubRel(PubAck),
    PubComp(PubAck),
    Subscribe(Subscribe),
    SubAck(SubAck),
    Unsubscribe(Unsubscribe),
    UnsubAck(UnsubAck),
    PingReq,
    PingResp,
    Disconnect(Disconnect),
    Auth(Auth),
}

impl Packet {
    /// Control packet type number (1..=15).
    pub fn type_id(&self) -> u8 {
        match self {
            Packet::Connect(_) => 1,
            Packet::ConnAck(_) => 2,
            Packet::Publish(_) => 3,
            Packet::PubAck(_) => 4,
            Packet::PubRec(_) => 5,
            Packet::PubRel(_) => 6,
            Packet::PubComp(_) => 7,
            Packet::Subscribe(_) => 8,
            Packet::SubAck(_) => 9,
            Packet::Unsubscribe(_) => 10,
            Packet::UnsubAck(_) => 11,
            Packet::PingReq => 12,
            Packet::PingResp => 13,
            Packet::Disconnect(_) => 14,
            Packet::Auth(_) => 15,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Packet::Connect(_) => "CONNECT",
            Packet::ConnAck(_) => "CONNACK",
            Packet::Publish(_) => "PUBLISH",
            Packet::PubAck(_) => "PUBACK",
            Packet::PubRec(_) => "PUBREC",
            Packet::PubRel(_) => "PUBREL",
            Packet::PubComp(_) => "PUBCOMP",
            Packet::Subscribe(_) => "SUBSCRIBE",
            Packet::SubAck(_) => "SUBACK",
            Packet::Unsubscribe(_) => "UNSUBSCRIBE",
            Packet::UnsubAck(_) => "UNSUBACK",
            Packet::PingReq => "PINGREQ",
            Packet::PingResp => "PINGRESP",
            Packet::Disconnect(_) => "DISCONNECT",
            Packet::Auth(_) => "AUTH",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub protocol: Protocol,
    pub clean_start: bool,
    /// Seconds; 0 disables keepalive.
    pub keep_alive: u16,
    pub client_id: String,
    pub will: Option<Will>,
    pub username: Option<String>,
    pub password: Option<Bytes>,
    /// MQTT 5 only; empty otherwise.
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    pub topic: String,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    /// MQTT 5 will properties; empty otherwise.
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnAck {
    pub session_present: bool,
    /// The MQTT 5 reason code; for 3.1/3.1.1 the return code (0..=5), see
    /// [`crate::ReasonCode::to_v3_connack`].
    pub code: u8,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub dup: bool,
    pub qos: QoS,
    pub retain: bool,
    /// May be empty in MQTT 5 when a topic alias is given.
    pub topic: String,
    /// Zero for QoS 0, non-zero otherwise.
    pub packet_id: u16,
    pub payload: Bytes,
    pub properties: Properties,
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP share one shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    pub packet_id: u16,
    /// 0 = success. Always 0 for 3.1.1.
    pub code: u8,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub packet_id: u16,
    pub filters: Vec<SubscribeFilter>,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeFilter {
    pub filter: String,
    pub options: SubOptions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubOptions {
    pub qos: QoS,
    /// MQTT 5 only.
    pub no_local: bool,
    /// MQTT 5 only.
    pub retain_as_published: bool,
    /// MQTT 5 only: 0 send retained on subscribe, 1 only if the subscription is new, 2 never.
    pub retain_handling: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck {
    pub packet_id: u16,
    /// One per filter: granted QoS (0..=2) or a failure code (0x80 and, in 5.0, others).
    pub codes: Vec<u8>,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub packet_id: u16,
    pub filters: Vec<String>,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubAck {
    pub packet_id: u16,
    /// MQTT 5 only: one reason code per filter. Empty for 3.1.1.
    pub codes: Vec<u8>,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disconnect {
    /// MQTT 5 reason code; 0 (normal) for 3.1.1.
    pub code: u8,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Auth {
    pub code: u8,
    pub properties: Properties,
}
