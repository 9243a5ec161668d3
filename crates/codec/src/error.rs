//! Decoding errors and MQTT 5 reason codes.

use thiserror::Error;

/// Why a packet could not be decoded. Each maps to the reason code a server sends in its
/// DISCONNECT (5.0) before closing; a 3.1.1 connection is simply closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Bytes that do not form a valid packet (bad lengths, bad UTF-8, reserved bits, ...).
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
    /// A well-formed packet that breaks a protocol rule (packet id 0, property not allowed
    /// in this packet, duplicate property, ...).
    #[error("protocol error: {0}")]
    Protocol(&'static str),
    /// The remaining length announced in the fixed header exceeds the allowed maximum.
    #[error("packet of {size} bytes exceeds the maximum of {max}")]
    TooLarge { size: usize, max: usize },
    /// CONNECT with a protocol name or level this codec does not speak.
    #[error("unsupported protocol version")]
    UnsupportedProtocol,
    /// A topic name or filter that breaks the topic rules.
    #[error("invalid topic: {0}")]
    Topic(&'static str),
}

impl DecodeError {
    pub fn reason_code(&self) -> ReasonCode {
        match self {
            DecodeError::Malformed(_) => ReasonCode::MalformedPacket,
            DecodeError::Protocol(_) => ReasonCode::ProtocolError,
            DecodeError::TooLarge { .. } => ReasonCode::PacketTooLarge,
            DecodeError::UnsupportedProtocol => ReasonCode::UnsupportedProtocolVersion,
            DecodeError::Topic(_) => ReasonCode::TopicNameInvalid,
        }
    }
}

/// MQTT 5 reason codes (specification section 2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReasonCode {
    Success = 0x00,
    GrantedQoS1 = 0x01,
    GrantedQoS2 = 0x02,
    DisconnectWithWill = 0x04,
    NoMatchingSubscribers = 0x10,
    NoSubscriptionExisted = 0x11,
    ContinueAuthentication = 0x18,
    ReAuthenticate = 0x19,
    UnspecifiedError = 0x80,
    MalformedPacket = 0x81,
    ProtocolError = 0x82,
    ImplementationSpecificError = 0x83,
    UnsupportedProtocolVersion = 0x84,
    ClientIdentifierNotValid = 0x85,
    BadUserNameOrPassword = 0x86,
    NotAuthorized = 0x87,
    ServerUnavailable = 0x88,
    ServerBusy = 0x89,
    Banned = 0x8A,
    ServerShuttingDown = 0x8B,
    BadAuthenticationMethod = 0x8C,
    KeepAliveTimeout = 0x8D,
    SessionTakenOver = 0x8E,
    TopicFilterInvalid = 0x8F,
    TopicNameInvalid = 0x90,
    PacketIdentifierInUse = 0x91,
    PacketIdentifierNotFound = 0x92,
    ReceiveMaximumExceeded = 0x93,
    TopicAliasInvalid = 0x94,
    PacketTooLarge = 0x95,
    MessageRateTooHigh = 0x96,
    QuotaExceeded = 0x97,
    AdministrativeAction = 0x98,
    PayloadFormatInvalid = 0x99,
    RetainNotSupported = 0x9A,
    QoSNotSupported = 0x9B,
    UseAnotherServer = 0x9C,
    ServerMoved = 0x9D,
    SharedSubscriptionsNotSupported = 0x9E,
    ConnectionRateExceeded = 0x9F,
    MaximumConnectTime = 0xA0,
    SubscriptionIdentifiersNotSupported = 0xA1,
    WildcardSubscriptionsNotSupported = 0xA2,
}

impl ReasonCode {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The 3.1.1 CONNACK return code closest to this reason (3.1.1 has only 0..=5).
    pub fn to_v3_connack(self) -> u8 {
        match self {
            ReasonCode::Success => 0,
            ReasonCode::UnsupportedProtocolVersion => 1,
            ReasonCode::ClientIdentifierNotValid => 2,
            ReasonCode::BadUserNameOrPassword | ReasonCode::BadAuthenticationMethod => 4,
            ReasonCode::NotAuthorized | ReasonCode::Banned => 5,
            _ => 3, // server unavailable
        }
    }
}
