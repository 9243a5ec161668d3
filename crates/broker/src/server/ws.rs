//! MQTT over WebSocket: the upgrade handshake and framing, on the same non-blocking sockets
//! and loop as plain TCP. tungstenite does the WebSocket protocol; MQTT bytes travel in binary
//! messages, which may split or join MQTT packets freely [MQTT-6.0.0-2].

use mio::net::TcpStream;
use tungstenite::handshake::server::{Callback, ErrorResponse, Request, Response};
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::http::{HeaderValue, StatusCode};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{ServerHandshake, WebSocket};

/// Accepts only the configured path and the `mqtt` subprotocol (or `mqttv3.1`), and answers
/// with the subprotocol chosen.
pub struct Upgrade {
    pub path: String,
}

fn reject(status: StatusCode, text: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(text.to_string()));
    *r.status_mut() = status;
    r
}

impl Callback for Upgrade {
    fn on_request(
        self,
        request: &Request,
        mut response: Response,
    ) -> Result<Response, ErrorResponse> {
        if request.uri().path() != self.path {
            return Err(reject(
                StatusCode::NOT_FOUND,
                "no MQTT endpoint at this path",
            ));
        }
        let offered = request
            .headers()
            .get_all("Sec-WebSocket-Protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .find(|p| p.eq_ignore_ascii_case("mqtt") || p.eq_ignore_ascii_case("mqttv3.1"))
            .map(str::to_string);
        match offered {
            Some(p) => {
                if let Ok(v) = HeaderValue::from_str(&p) {
                    response.headers_mut().insert("Sec-WebSocket-Protocol", v);
                }
                Ok(response)
            }
            None => Err(reject(
                StatusCode::BAD_REQUEST,
                "subprotocol `mqtt` required",
            )),
        }
    }
}

pub type Handshake = MidHandshake<ServerHandshake<TcpStream, Upgrade>>;

pub enum Progress {
    Done(Box<WebSocket<TcpStream>>),
    Pending(Box<Handshake>),
    Failed(String),
}

/// Small buffers: a WebSocket connection should not cost much more than a TCP one.
pub fn config(max_packet_size: u32) -> WebSocketConfig {
    let max = max_packet_size as usize + 1024;
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
}

fn progress(
    r: Result<WebSocket<TcpStream>, HandshakeError<ServerHandshake<TcpStream, Upgrade>>>,
) -> Progress {
    match r {
        Ok(ws) => Progress::Done(Box::new(ws)),
        Err(HandshakeError::Interrupted(mid)) => Progress::Pending(Box::new(mid)),
        Err(HandshakeError::Failure(e)) => Progress::Failed(e.to_string()),
    }
}

pub fn start(stream: TcpStream, path: &str, max_packet_size: u32) -> Progress {
    let up = Upgrade {
        path: path.to_string(),
    };
    progress(tungstenite::accept_hdr_with_config(
        stream,
        up,
        Some(config(max_packet_size)),
    ))
}

pub fn resume(mid: Handshake) -> Progress {
    progress(mid.handshake())
}
