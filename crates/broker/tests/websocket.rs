//! MQTT over WebSocket: `ws://host:port/mqtt` with the `mqtt` subprotocol, binary frames.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::*;
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::{Message, WebSocket};

struct WsClient {
    ws: WebSocket<TcpStream>,
    proto: Protocol,
    buf: BytesMut,
}

fn handshake(
    addr: SocketAddr,
    path: &str,
    subprotocol: Option<&str>,
) -> Result<
    (
        WebSocket<TcpStream>,
        tungstenite::handshake::client::Response,
    ),
    String,
> {
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    if let Some(p) = subprotocol {
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
    }
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    tungstenite::client::client(req, stream).map_err(|e| format!("{e}"))
}

impl WsClient {
    fn open(addr: SocketAddr, proto: Protocol) -> WsClient {
        let (ws, resp) =
            handshake(addr, "/mqtt", Some("mqtt")).expect("WebSocket handshake on /mqtt");
        assert_eq!(
            resp.headers()
                .get("Sec-WebSocket-Protocol")
                .map(|v| v.to_str().unwrap().to_string()),
            Some("mqtt".to_string()),
            "the broker selects the mqtt subprotocol"
        );
        WsClient {
            ws,
            proto,
            buf: BytesMut::new(),
        }
    }

    fn connect(addr: SocketAddr, proto: Protocol, id: &str) -> WsClient {
        let mut c = WsClient::open(addr, proto);
        c.send(Packet::Connect(connect_packet(proto, id)));
        match c.recv() {
            Some(Packet::ConnAck(a)) => assert_eq!(a.code, 0, "{a:?}"),
            other => panic!("expected CONNACK over WebSocket, got {other:?}"),
        }
        c
    }

    fn send_bytes(&mut self, b: Vec<u8>) {
        self.ws.send(Message::Binary(b.into())).expect("ws send");
    }

    fn send(&mut self, p: Packet) {
        let b = encode(&p, self.proto);
        self.send_bytes(b);
    }

    /// Next MQTT packet, or None on close or timeout.
    fn recv(&mut self) -> Option<Packet> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(h) = ballast_codec::check(&self.buf, usize::MAX).unwrap() {
                if self.buf.len() >= h.total_len() {
                    let frame: Bytes = self.buf.split_to(h.total_len()).freeze();
                    return Some(
                        ballast_codec::decode(frame, self.proto)
                            .expect("broker sent a valid packet"),
                    );
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            match self.ws.read() {
                Ok(Message::Binary(b)) => self.buf.extend_from_slice(&b),
                Ok(Message::Close(_)) => return None,
                Ok(Message::Text(t)) => panic!("broker sent a text frame: {t}"),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    fn recv_publish(&mut self) -> Publish {
        loop {
            match self.recv() {
                Some(Packet::Publish(p)) => return p,
                Some(_) => {}
                None => panic!("expected a PUBLISH over WebSocket"),
            }
        }
    }
}

#[test]
fn websocket_client_publishes_and_subscribes() {
    let b = start_broker();
    for proto in [V5, V311] {
        let mut ws = WsClient::connect(b.ws, proto, "wsclient");
        ws.send(Packet::Subscribe(Subscribe {
            packet_id: 1,
            filters: vec![filter("ws/in", QoS::AtLeastOnce)],
            properties: Properties::default(),
        }));
        match ws.recv() {
            Some(Packet::SubAck(a)) => assert_eq!(a.codes, vec![1]),
            other => panic!("expected SUBACK, got {other:?}"),
        }
        let mut tcp = Client::connect(b.mqtt, proto, "tcpclient", |_| {}).0;
        tcp.sub("ws/out", QoS::AtMostOnce);

        tcp.publish("ws/in", "to ws", QoS::AtLeastOnce);
        let p = ws.recv_publish();
        assert_eq!(
            (p.topic.as_str(), &p.payload[..], p.qos),
            ("ws/in", &b"to ws"[..], QoS::AtLeastOnce)
        );
        ws.send(Packet::PubAck(PubAck {
            packet_id: p.packet_id,
            code: 0,
            properties: Properties::default(),
        }));

        ws.send(Packet::Publish(publish_packet(
            "ws/out",
            "from ws",
            QoS::AtMostOnce,
            false,
        )));
        let p = tcp.recv_publish();
        assert_eq!(&p.payload[..], b"from ws");
        ws.send(Packet::Disconnect(Disconnect::default()));
        tcp.disconnect();
        wait_connections(&b, 0);
    }
}

#[test]
fn mqtt_packets_may_span_and_share_websocket_frames() {
    let b = start_broker();
    let mut ws = WsClient::open(b.ws, V5);
    let connect = encode(&Packet::Connect(connect_packet(V5, "frames")), V5);
    // CONNECT split over two frames.
    let (a, rest) = connect.split_at(5);
    ws.send_bytes(a.to_vec());
    ws.send_bytes(rest.to_vec());
    assert!(matches!(ws.recv(), Some(Packet::ConnAck(a)) if a.code == 0));
    // SUBSCRIBE and PINGREQ in one frame.
    let mut both = encode(
        &Packet::Subscribe(Subscribe {
            packet_id: 7,
            filters: vec![filter("f/t", QoS::AtMostOnce)],
            properties: Properties::default(),
        }),
        V5,
    );
    both.extend(encode(&Packet::PingReq, V5));
    ws.send_bytes(both);
    assert!(matches!(ws.recv(), Some(Packet::SubAck(a)) if a.packet_id == 7));
    assert!(matches!(ws.recv(), Some(Packet::PingResp)));
}

#[test]
fn wrong_websocket_path_is_refused() {
    let b = start_broker();
    assert!(
        handshake(b.ws, "/not-mqtt", Some("mqtt")).is_err(),
        "an upgrade on a path other than ws_path is refused"
    );
    // The right path still works.
    let _ = WsClient::connect(b.ws, V311, "ok");
}

#[test]
fn configured_websocket_path_is_used() {
    let mut cfg = test_config();
    cfg.ws_path = "/custom/ws".into();
    let b = start_broker_with(cfg);
    assert!(handshake(b.ws, "/mqtt", Some("mqtt")).is_err());
    let (mut ws, _) =
        handshake(b.ws, "/custom/ws", Some("mqtt")).expect("handshake on the configured path");
    ws.send(Message::Binary(
        encode(&Packet::Connect(connect_packet(V311, "custom")), V311).into(),
    ))
    .unwrap();
    let mut c = WsClient {
        ws,
        proto: V311,
        buf: BytesMut::new(),
    };
    assert!(matches!(c.recv(), Some(Packet::ConnAck(a)) if a.code == 0));
}

#[test]
fn text_frame_closes_the_connection() {
    let b = start_broker();
    let mut ws = WsClient::connect(b.ws, V311, "texter");
    ws.ws.send(Message::Text("hello".into())).unwrap();
    // [MQTT-6.0.0-1]: data not in binary frames closes the connection.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if ws.recv().is_none() {
            wait_connections(&b, 0);
            return;
        }
    }
    panic!("connection still open after a text frame");
}

#[test]
fn websocket_connections_count_and_get_shutdown_disconnect() {
    let b = start_broker();
    let mut ws = WsClient::connect(b.ws, V5, "wsdown");
    wait_connections(&b, 1);
    b.shutdown();
    match ws.recv() {
        Some(Packet::Disconnect(d)) => assert_eq!(d.code, 0x8B),
        other => panic!("expected DISCONNECT 0x8B over WebSocket, got {other:?}"),
    }
}
