//! A minimal MQTT client for load generation, on tokio with the project's codec.
//!
//! General client libraries spend more per message than the brokers under test; this one
//! batches: a publisher encodes every message due in a tick into one buffer and writes it with
//! one call, and a subscriber decodes every complete packet of a read before acknowledging
//! them all in one write.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ballast_codec::{check, decode, Connect, Packet, Properties, Protocol};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Reads whole packets from a stream.
pub struct Reader {
    buf: BytesMut,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            buf: BytesMut::with_capacity(64 * 1024),
        }
    }
}

impl Reader {
    /// Reads once (waiting for data) and returns every complete packet now buffered.
    pub async fn read_batch(
        &mut self,
        s: &mut (impl AsyncReadExt + Unpin),
        protocol: Protocol,
        out: &mut Vec<Packet>,
    ) -> Result<()> {
        if self.buf.capacity() - self.buf.len() < 16 * 1024 {
            self.buf.reserve(64 * 1024);
        }
        let n = s.read_buf(&mut self.buf).await?;
        if n == 0 {
            bail!("connection closed by the broker");
        }
        self.drain(protocol, out)
    }

    pub fn drain(&mut self, protocol: Protocol, out: &mut Vec<Packet>) -> Result<()> {
        loop {
            let Some(h) = check(&self.buf, usize::MAX)? else {
                return Ok(());
            };
            if self.buf.len() < h.total_len() {
                return Ok(());
            }
            let frame = self.buf.split_to(h.total_len()).freeze();
            out.push(decode(frame, protocol)?);
        }
    }

    /// Reads until one packet is available and returns it.
    pub async fn next(
        &mut self,
        s: &mut (impl AsyncReadExt + Unpin),
        protocol: Protocol,
    ) -> Result<Packet> {
        let mut v = Vec::with_capacity(1);
        loop {
            self.drain(protocol, &mut v)?;
            if !v.is_empty() {
                let p = v.remove(0);
                if !v.is_empty() {
                    // Put the rest back in front: re-encode is not needed since only CONNACK
                    // is read this way, before anything else can arrive.
                    bail!("unexpected packets after {}", p.name());
                }
                return Ok(p);
            }
            self.read_batch(s, protocol, &mut v).await?;
        }
    }
}

pub struct ConnectOptions {
    pub protocol: Protocol,
    pub keep_alive: u16,
    pub clean: bool,
    /// 5.0 Session Expiry Interval in seconds (a persistent session when set; 3.1.1 uses
    /// `clean: false`).
    pub session_expiry: Option<u32>,
    /// Local address to connect from (spreads connections over 127.0.0.0/8).
    pub bind: Option<std::net::IpAddr>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            protocol: Protocol::V3_1_1,
            keep_alive: 600,
            clean: true,
            session_expiry: None,
            bind: None,
        }
    }
}

/// Opens a TCP connection, sends CONNECT and waits for a successful CONNACK.
pub async fn connect(
    addr: SocketAddr,
    client_id: &str,
    o: &ConnectOptions,
) -> Result<(TcpStream, Reader)> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = o.bind {
        sock.bind(SocketAddr::new(ip, 0))
            .with_context(|| format!("bind {ip}"))?;
    }
    let mut s = tokio::time::timeout(Duration::from_secs(30), sock.connect(addr))
        .await
        .context("connect timed out")?
        .with_context(|| format!("connect to {addr}"))?;
    s.set_nodelay(true)?;
    let c = Packet::Connect(Connect {
        protocol: o.protocol,
        clean_start: o.clean,
        keep_alive: o.keep_alive,
        client_id: client_id.to_string(),
        will: None,
        username: None,
        password: None,
        properties: Properties {
            session_expiry_interval: o.session_expiry,
            ..Properties::default()
        },
    });
    let mut buf = Vec::new();
    c.encode(o.protocol, &mut buf);
    s.write_all(&buf).await?;
    let mut r = Reader::default();
    let p = tokio::time::timeout(Duration::from_secs(30), r.next(&mut s, o.protocol))
        .await
        .context("no CONNACK within 30 s")??;
    match p {
        Packet::ConnAck(a) if a.code == 0 => Ok((s, r)),
        Packet::ConnAck(a) => bail!("connection refused with code {:#04x}", a.code),
        other => bail!("expected CONNACK, got {}", other.name()),
    }
}

/// Subscribes to one filter and waits for a SUBACK that grants it.
pub async fn subscribe(
    s: &mut TcpStream,
    r: &mut Reader,
    protocol: Protocol,
    filter: String,
    qos: ballast_codec::QoS,
) -> Result<()> {
    let sub = Packet::Subscribe(ballast_codec::Subscribe {
        packet_id: 1,
        filters: vec![ballast_codec::SubscribeFilter {
            filter,
            options: ballast_codec::SubOptions {
                qos,
                ..Default::default()
            },
        }],
        properties: Properties::default(),
    });
    let mut buf = Vec::new();
    sub.encode(protocol, &mut buf);
    s.write_all(&buf).await?;
    match r.next(s, protocol).await? {
        Packet::SubAck(ack) if ack.codes.first().is_some_and(|c| *c < 0x80) => Ok(()),
        other => bail!("subscribe refused: {other:?}"),
    }
}

/// The benchmark header at the front of every payload: send time and sequence.
pub const HEADER: usize = 16;

pub fn put_header(payload: &mut [u8], sent_ns: u64, publisher: u32, seq: u32) {
    payload[0..8].copy_from_slice(&sent_ns.to_be_bytes());
    payload[8..12].copy_from_slice(&publisher.to_be_bytes());
    payload[12..16].copy_from_slice(&seq.to_be_bytes());
}

pub fn read_header(payload: &Bytes) -> Option<(u64, u32, u32)> {
    if payload.len() < HEADER {
        return None;
    }
    let mut p = &payload[..HEADER];
    Some((p.get_u64(), p.get_u32(), p.get_u32()))
}
