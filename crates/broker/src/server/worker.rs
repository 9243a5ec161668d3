//! One data-plane loop thread: a `mio` poll over the connections it owns.
//!
//! Each turn: accept, read and decode every complete packet of every readable connection,
//! hand each to the protocol core, then drain the inbox (flush and close requests from any
//! thread) and write each ready outbox with one syscall. Keepalive, CONNECT and write
//! deadlines live in a coarse timer wheel checked every tick, not a timer per connection.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_codec::{check, decode, DecodeError};
use bytes::{Bytes, BytesMut};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::ws::{self, Handshake, Progress};
use super::{ListenerKind, WAKER};
use crate::core::{set_current_worker, Broker, Close, Cmd, ConnLoc, Connection, Phase};
use crate::metrics::{bump, CloseReason, Limit, Metrics};

const LISTENER_BASE: usize = usize::MAX - 16;
const READ_CHUNK: usize = 64 * 1024;
/// Reads per connection per turn before others get a turn.
const READS_PER_TURN: usize = 8;
const TICK: Duration = Duration::from_millis(100);
const WHEEL_SLOTS: usize = 1024;
/// Outbox capacity kept after a full flush; larger buffers are freed so idle connections
/// hold none.
const KEEP_CAPACITY: usize = 1024;

enum Io {
    Tcp(TcpStream),
    Handshake(Option<Box<Handshake>>),
    Ws(Box<tungstenite::WebSocket<TcpStream>>),
}

struct Conn {
    io: Io,
    core: Connection,
    /// Bytes taken from the session outbox and not yet written.
    pending: Vec<u8>,
    /// A partial packet carried over between reads; `None` when there is none (boxed: most
    /// connections have none most of the time).
    partial: Option<Box<BytesMut>>,
    write_interest: bool,
    /// Listed in `again`: its read budget ran out with data left.
    read_again: bool,
    /// When the outbox last went from empty to stuck, as a wheel stamp (4 bytes, not an
    /// `Instant`'s 16: this struct is paid for by every idle connection).
    stalled_since: Option<Stamp>,
}

/// A point in time as whole wheel ticks after the wheel's origin, rounded up (so a deadline
/// computed from it is never early), plus one so that `Option<Stamp>` stays 4 bytes. 32 bits
/// of 100 ms ticks last 13 years; later times saturate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp(std::num::NonZeroU32);

/// Coarse timer wheel of (token, generation); entries are checked, not cancelled: a
/// connection whose deadline moved is re-inserted at its new deadline when its old one comes.
struct Wheel {
    slots: Vec<Vec<(u32, u32)>>,
    origin: Instant,
    tick: u64,
}

impl Wheel {
    fn new(now: Instant) -> Wheel {
        Wheel {
            slots: (0..WHEEL_SLOTS).map(|_| Vec::new()).collect(),
            origin: now,
            tick: 0,
        }
    }

    fn ticks(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.origin).as_millis() / TICK.as_millis()) as u64
    }

    fn stamp(&self, t: Instant) -> Stamp {
        let ticks = t
            .saturating_duration_since(self.origin)
            .as_millis()
            .div_ceil(TICK.as_millis());
        Stamp(std::num::NonZeroU32::MIN.saturating_add(u32::try_from(ticks).unwrap_or(u32::MAX)))
    }

    fn instant(&self, s: Stamp) -> Instant {
        self.origin + TICK * (s.0.get() - 1)
    }

    fn insert(&mut self, at: Instant, token: u32, gen: u32) {
        let t = self
            .ticks(at)
            .clamp(self.tick + 1, self.tick + WHEEL_SLOTS as u64 - 1);
        self.slots[(t % WHEEL_SLOTS as u64) as usize].push((token, gen));
    }

    fn due(&mut self, now: Instant, out: &mut Vec<(u32, u32)>) {
        let target = self.ticks(now);
        while self.tick < target {
            self.tick += 1;
            out.append(&mut self.slots[(self.tick % WHEEL_SLOTS as u64) as usize]);
        }
    }
}

struct Worker {
    id: u16,
    poll: Poll,
    b: Arc<Broker>,
    listeners: Vec<(ListenerKind, TcpListener)>,
    conns: Slab<Conn>,
    next_gen: u32,
    scratch: Box<[u8]>,
    wheel: Wheel,
    /// Connections that still had data when their read budget ran out.
    again: Vec<(u32, u32)>,
    /// Connections holding answers back until store writes are durable.
    waiting: Vec<(u32, u32)>,
    /// The store's durable ticket when `waiting` was last looked at.
    last_durable: u64,
    accept_paused_until: Option<Instant>,
}

pub fn run(
    id: u16,
    poll: Poll,
    listeners: Vec<(ListenerKind, std::net::TcpListener)>,
    b: Arc<Broker>,
) {
    Metrics::bind_thread(id as usize);
    set_current_worker(id);
    let now = Instant::now();
    let mut w = Worker {
        id,
        poll,
        b,
        listeners: Vec::new(),
        conns: Slab::new(),
        next_gen: 0,
        scratch: vec![0u8; READ_CHUNK].into_boxed_slice(),
        wheel: Wheel::new(now),
        again: Vec::new(),
        waiting: Vec::new(),
        last_durable: 0,
        accept_paused_until: None,
    };
    for (i, (kind, l)) in listeners.into_iter().enumerate() {
        let mut l = TcpListener::from_std(l);
        if let Err(e) =
            w.poll
                .registry()
                .register(&mut l, Token(LISTENER_BASE + i), Interest::READABLE)
        {
            tracing::error!(error = %e, "cannot register listener");
            continue;
        }
        w.listeners.push((kind, l));
    }
    w.run();
}

impl Worker {
    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut cmds = Vec::new();
        let mut due = Vec::new();
        let mut next_tick = Instant::now() + TICK;
        loop {
            let store_advanced = !self.waiting.is_empty()
                && self
                    .b
                    .writer
                    .as_ref()
                    .is_some_and(|w| w.durable() != self.last_durable);
            let timeout = if self.again.is_empty() && !store_advanced {
                next_tick.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "poll failed");
                }
            }
            if self.b.shutting_down.load(Ordering::SeqCst) {
                self.shutdown();
                return;
            }
            let now = Instant::now();
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE, now),
                    Token(t) => {
                        let Some(gen) = self.conns.get(t).map(|c| c.core.loc.gen) else {
                            continue;
                        };
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.readable(t, gen, now);
                        }
                        if ev.is_writable() {
                            self.flush(t, gen, now);
                        }
                    }
                }
            }
            for (t, gen) in std::mem::take(&mut self.again) {
                if let Some(c) = self.conns.get_mut(t as usize) {
                    c.read_again = false;
                }
                self.readable(t as usize, gen, now);
            }
            // What this turn's packets submitted goes to the store as one group.
            crate::core::journal::kick(self.b.writer.as_ref());
            self.release_waiting(now);
            // Commands from other threads and from this one (own publishes need no wake-up,
            // so drain until nothing new arrives).
            for _ in 0..16 {
                self.b.inboxes[self.id as usize].drain(&mut cmds);
                if cmds.is_empty() {
                    break;
                }
                for cmd in cmds.drain(..) {
                    match cmd {
                        Cmd::Flush(loc) => self.flush(loc.token as usize, loc.gen, now),
                        Cmd::Close(loc, reason, code) => {
                            let close = Close {
                                reason,
                                code,
                                message: None,
                            };
                            self.close(loc.token as usize, loc.gen, close, now);
                        }
                    }
                }
            }
            // Closed connections' sessions, for instance.
            crate::core::journal::kick(self.b.writer.as_ref());
            if now >= next_tick {
                next_tick = now + TICK;
                self.wheel.due(now, &mut due);
                for (t, gen) in due.drain(..) {
                    self.check_deadline(t as usize, gen, now);
                }
                if self.accept_paused_until.is_some_and(|t| t <= now) {
                    self.accept_paused_until = None;
                    for i in 0..self.listeners.len() {
                        self.accept(i, now);
                    }
                }
            }
        }
    }

    // ---- accept ---------------------------------------------------------------------------

    fn accept(&mut self, i: usize, now: Instant) {
        if self.accept_paused_until.is_some() {
            return;
        }
        loop {
            let Some((kind, l)) = self.listeners.get(i) else {
                return;
            };
            let kind = *kind;
            let (stream, _peer) = match l.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors (EMFILE/ENFILE) or similar: pause accepting
                    // briefly instead of spinning on a listener that stays readable.
                    tracing::warn!(error = %e, "accept failed; pausing accepts for 100 ms");
                    self.accept_paused_until = Some(now + TICK);
                    return;
                }
            };
            let _ = stream.set_nodelay(true);
            self.add(stream, kind, now);
        }
    }

    fn add(&mut self, mut stream: TcpStream, kind: ListenerKind, now: Instant) {
        let b = self.b.clone();
        let entry = self.conns.vacant_entry();
        let token = entry.key();
        // WebSocket connections also watch writability from the start: the handshake may
        // need to resume when the socket drains.
        let interest = match kind {
            ListenerKind::Mqtt => Interest::READABLE,
            ListenerKind::Ws => Interest::READABLE | Interest::WRITABLE,
        };
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, Token(token), interest)
        {
            tracing::warn!(error = %e, "cannot register connection");
            return;
        }
        let count = b.metrics.connections.fetch_add(1, Ordering::Relaxed) + 1;
        b.metrics.add(|c| &c.connections_accepted, 1);
        let over_limit = count as usize > b.config.limits.max_connections;
        self.next_gen = self.next_gen.wrapping_add(1);
        let gen = self.next_gen;
        let loc = ConnLoc {
            worker: self.id,
            token: token as u32,
            gen,
        };
        let io = match kind {
            ListenerKind::Mqtt => Io::Tcp(stream),
            ListenerKind::Ws => {
                match ws::start(stream, &b.config.ws_path, b.config.limits.max_packet_size) {
                    Progress::Done(w) => Io::Ws(w),
                    Progress::Pending(mid) => Io::Handshake(Some(mid)),
                    Progress::Failed(e) => {
                        // The socket was moved into the failed handshake and is closed with it.
                        tracing::debug!(error = %e, "websocket handshake failed");
                        b.metrics.connections.fetch_sub(1, Ordering::Relaxed);
                        b.metrics.closed(CloseReason::ProtocolError);
                        return;
                    }
                }
            }
        };
        entry.insert(Conn {
            io,
            core: Connection::new(loc, now, over_limit),
            pending: Vec::new(),
            partial: None,
            write_interest: kind == ListenerKind::Ws,
            read_again: false,
            stalled_since: None,
        });
        self.wheel
            .insert(now + b.config.limits.connect_timeout(), token as u32, gen);
    }

    // ---- read -----------------------------------------------------------------------------

    fn readable(&mut self, t: usize, gen: u32, now: Instant) {
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if conn.core.loc.gen != gen {
            return;
        }
        let result = match &mut conn.io {
            Io::Tcp(_) => self.read_tcp(t, now),
            Io::Handshake(_) => self.handshake(t, now),
            Io::Ws(_) => self.read_ws(t, now),
        };
        self.wait_for_store(t);
        match result {
            Ok(()) => self.flush(t, gen, now),
            Err(close) => self.close(t, gen, close, now),
        }
    }

    /// Lists a connection whose answers wait for the store.
    fn wait_for_store(&mut self, t: usize) {
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if conn.core.has_held() && conn.core.list_waiting() {
            self.waiting.push((t as u32, conn.core.loc.gen));
            // Set before `release_waiting` reads the durable ticket, so a commit in between
            // still wakes this thread.
            self.b.inboxes[self.id as usize]
                .wants_durable
                .store(true, Ordering::SeqCst);
        }
    }

    /// Whether reading may go on; otherwise marks the connection paused (it is resumed when
    /// its held answers are released).
    fn may_read(&mut self, t: usize) -> bool {
        let conn = &mut self.conns[t];
        if conn.core.wants_read(&self.b) {
            return true;
        }
        conn.core.pause_reading();
        false
    }

    /// Sends the answers whose store writes resolved since the last look, and resumes reading
    /// connections that were paused for them.
    fn release_waiting(&mut self, now: Instant) {
        let Some(w) = &self.b.writer else {
            return;
        };
        if self.waiting.is_empty() {
            return;
        }
        let durable = w.durable();
        if durable == self.last_durable {
            return;
        }
        self.last_durable = durable;
        let b = self.b.clone();
        for (t, gen) in std::mem::take(&mut self.waiting) {
            let Some(conn) = self.conns.get_mut(t as usize) else {
                continue;
            };
            if conn.core.loc.gen != gen {
                continue;
            }
            match conn.core.release_held(&b) {
                Err(close) => {
                    self.close(t as usize, gen, close, now);
                    continue;
                }
                Ok(true) => self.waiting.push((t, gen)),
                Ok(false) => conn.core.unlist_waiting(),
            }
            if conn.core.resume_reading(&b) && !conn.read_again {
                conn.read_again = true;
                self.again.push((t, gen));
            }
        }
        if self.waiting.is_empty() {
            self.b.inboxes[self.id as usize]
                .wants_durable
                .store(false, Ordering::SeqCst);
        }
    }

    fn read_tcp(&mut self, t: usize, now: Instant) -> Result<(), Close> {
        for _ in 0..READS_PER_TURN {
            if !self.may_read(t) {
                return Ok(());
            }
            let conn = &mut self.conns[t];
            let Io::Tcp(stream) = &mut conn.io else {
                return Ok(());
            };
            let n = match stream.read(&mut self.scratch) {
                Ok(0) => return Err(Close::silent(CloseReason::PeerClosed)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Close::silent(CloseReason::IoError)),
            };
            self.b
                .metrics
                .with(|c, _| bump(&c.bytes_received, n as u64));
            let data = match conn.partial.take() {
                Some(p) => {
                    let mut p = *p;
                    p.extend_from_slice(&self.scratch[..n]);
                    p.freeze()
                }
                None => Bytes::copy_from_slice(&self.scratch[..n]),
            };
            self.process(t, data, now)?;
        }
        self.read_later(t);
        Ok(())
    }

    fn read_ws(&mut self, t: usize, now: Instant) -> Result<(), Close> {
        for _ in 0..READS_PER_TURN * 4 {
            if !self.may_read(t) {
                return Ok(());
            }
            let conn = &mut self.conns[t];
            let Io::Ws(ws) = &mut conn.io else {
                return Ok(());
            };
            let data = match ws.read() {
                Ok(tungstenite::Message::Binary(b)) => b,
                Ok(tungstenite::Message::Close(_)) => {
                    return Err(Close::silent(CloseReason::PeerClosed))
                }
                Ok(tungstenite::Message::Text(_)) => {
                    // MQTT travels in binary frames only [MQTT-6.0.0-1].
                    return Err(Close::new(
                        CloseReason::ProtocolError,
                        None,
                        "text websocket frame",
                    ));
                }
                Ok(_) => continue, // ping/pong are answered by tungstenite
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(())
                }
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Err(Close::silent(CloseReason::PeerClosed))
                }
                Err(tungstenite::Error::Capacity(_)) => {
                    self.b.metrics.limit(Limit::MaxPacketSize);
                    return Err(Close::silent(CloseReason::PacketTooLarge));
                }
                Err(_) => return Err(Close::silent(CloseReason::IoError)),
            };
            self.b
                .metrics
                .with(|c, _| bump(&c.bytes_received, data.len() as u64));
            let data = match conn.partial.take() {
                Some(p) => {
                    let mut p = *p;
                    p.extend_from_slice(&data);
                    p.freeze()
                }
                None => data,
            };
            self.process(t, data, now)?;
        }
        self.read_later(t);
        Ok(())
    }

    /// The read budget ran out with data left: read again next turn (edge-triggered
    /// readiness will not report it again).
    fn read_later(&mut self, t: usize) {
        let conn = &mut self.conns[t];
        if !conn.read_again {
            conn.read_again = true;
            self.again.push((t as u32, conn.core.loc.gen));
        }
    }

    fn handshake(&mut self, t: usize, now: Instant) -> Result<(), Close> {
        let conn = &mut self.conns[t];
        let Io::Handshake(mid) = &mut conn.io else {
            return Ok(());
        };
        let Some(m) = mid.take() else {
            return Err(Close::silent(CloseReason::IoError));
        };
        match ws::resume(*m) {
            Progress::Done(w) => {
                conn.io = Io::Ws(w);
                self.read_ws(t, now)
            }
            Progress::Pending(m) => {
                *mid = Some(m);
                Ok(())
            }
            Progress::Failed(e) => {
                tracing::debug!(error = %e, "websocket handshake failed");
                Err(Close::silent(CloseReason::ProtocolError))
            }
        }
    }

    /// Decodes and handles every complete packet in `data`; keeps a trailing partial packet.
    fn process(&mut self, t: usize, data: Bytes, now: Instant) -> Result<(), Close> {
        let b = &*self.b;
        let conn = &mut self.conns[t];
        let max = b.config.limits.max_packet_size as usize;
        let mut off = 0;
        let mut packets = 0u64;
        let result = loop {
            let rest = &data[off..];
            if rest.is_empty() {
                break Ok(());
            }
            let header = match check(rest, max) {
                Ok(Some(h)) => h,
                Ok(None) => break Ok(()),
                Err(e) => break Err(decode_close(b, &conn.core, &e)),
            };
            // Before CONNECT, only a CONNECT is acceptable [MQTT-3.1.0-1]; refuse others
            // before buffering them.
            if conn.core.phase == Phase::AwaitConnect && header.packet_type() != 1 {
                break Err(Close {
                    reason: CloseReason::ProtocolError,
                    code: Some(ballast_codec::ReasonCode::ProtocolError),
                    message: Some("first packet is not CONNECT"),
                });
            }
            let total = header.total_len();
            if rest.len() < total {
                break Ok(());
            }
            let frame = data.slice(off..off + total);
            off += total;
            packets += 1;
            let proto = conn.core.protocol;
            let was_connecting = conn.core.phase == Phase::AwaitConnect;
            let packet = match decode(frame, proto) {
                Ok(p) => p,
                Err(DecodeError::UnsupportedProtocol) if conn.core.phase == Phase::AwaitConnect => {
                    // Answer in 3.1.1 form: 0x01 unacceptable protocol version [MQTT-3.1.2-2].
                    conn.core
                        .direct()
                        .extend_from_slice(&[0x20, 0x02, 0x00, 0x01]);
                    break Err(Close {
                        reason: CloseReason::ConnectRefused,
                        code: Some(ballast_codec::ReasonCode::UnsupportedProtocolVersion),
                        message: Some("unsupported protocol version"),
                    });
                }
                Err(e) => break Err(decode_close(b, &conn.core, &e)),
            };
            if let Err(c) = conn.core.handle(b, packet, now) {
                break Err(c);
            }
            if was_connecting && conn.core.phase == Phase::Active {
                // CONNECT set the keepalive: watch it from now on. Later packets only move
                // `last_recv`; the wheel re-checks deadlines lazily.
                if let Some(d) = conn.core.deadline(b.config.limits.connect_timeout()) {
                    self.wheel.insert(d, t as u32, conn.core.loc.gen);
                }
            }
        };
        b.metrics.with(|c, _| bump(&c.packets_received, packets));
        if result.is_ok() && off < data.len() {
            conn.partial = Some(Box::new(BytesMut::from(&data[off..])));
        }
        result
    }

    // ---- write ----------------------------------------------------------------------------

    /// Writes what the connection has queued; a failed write closes it.
    fn flush(&mut self, t: usize, gen: u32, now: Instant) {
        if self.write_queued(t, gen, now).is_err() {
            self.close(t, gen, Close::silent(CloseReason::IoError), now);
        }
    }

    /// Moves the session outbox into `pending` and writes as much as the socket takes.
    fn write_queued(&mut self, t: usize, gen: u32, now: Instant) -> io::Result<()> {
        let Some(conn) = self.conns.get_mut(t) else {
            return Ok(());
        };
        if conn.core.loc.gen != gen {
            return Ok(());
        }
        if let Some(s) = &conn.core.session {
            let mut st = s.state.lock();
            if st.conn == Some(conn.core.loc) {
                if conn.pending.is_empty() {
                    std::mem::swap(&mut conn.pending, &mut st.out);
                } else {
                    conn.pending.append(&mut st.out);
                }
                st.flush_pending = false;
                st.backlog = conn.pending.len().min(u32::MAX as usize) as u32;
            }
        }
        conn.core.take_direct(&mut conn.pending);
        let written = write_out(conn)?;
        if written > 0 {
            self.b
                .metrics
                .with(|c, _| bump(&c.bytes_sent, written as u64));
        }
        let conn = &mut self.conns[t];
        if conn.pending.is_empty() {
            conn.stalled_since = None;
            if conn.pending.capacity() > KEEP_CAPACITY {
                conn.pending = Vec::new();
            }
            if let Some(s) = &conn.core.session {
                let mut st = s.state.lock();
                if st.conn == Some(conn.core.loc) {
                    st.backlog = 0;
                }
            }
        } else {
            if conn.stalled_since.is_none() {
                conn.stalled_since = Some(self.wheel.stamp(now));
                self.wheel
                    .insert(now + self.b.config.limits.write_timeout(), t as u32, gen);
            }
            if !conn.write_interest {
                conn.write_interest = true;
                if let Io::Tcp(s) = &mut conn.io {
                    let _ = self.poll.registry().reregister(
                        s,
                        Token(t),
                        Interest::READABLE | Interest::WRITABLE,
                    );
                }
            }
        }
        Ok(())
    }

    // ---- deadlines and close --------------------------------------------------------------

    fn check_deadline(&mut self, t: usize, gen: u32, now: Instant) {
        let Some(conn) = self.conns.get(t) else {
            return;
        };
        if conn.core.loc.gen != gen {
            return;
        }
        let limits = &self.b.config.limits;
        if let Some(since) = conn.stalled_since.map(|s| self.wheel.instant(s)) {
            if since + limits.write_timeout() <= now {
                self.b.metrics.limit(Limit::WriteTimeout);
                return self.close(t, gen, Close::silent(CloseReason::SlowConsumer), now);
            }
        }
        if let Some(d) = conn.core.deadline(limits.connect_timeout()) {
            if d <= now {
                let close = match conn.core.phase {
                    Phase::AwaitConnect => {
                        self.b.metrics.limit(Limit::ConnectTimeout);
                        Close::silent(CloseReason::ConnectTimeout)
                    }
                    Phase::Active => Close::new(
                        CloseReason::KeepAliveTimeout,
                        Some(ballast_codec::ReasonCode::KeepAliveTimeout),
                        "keepalive timeout",
                    ),
                };
                return self.close(t, gen, close, now);
            }
            self.wheel.insert(d, t as u32, gen);
        }
        if let Some(since) = conn.stalled_since.map(|s| self.wheel.instant(s)) {
            self.wheel
                .insert(since + limits.write_timeout(), t as u32, gen);
        }
    }

    fn close(&mut self, t: usize, gen: u32, close: Close, now: Instant) {
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if conn.core.loc.gen != gen {
            return;
        }
        let b = self.b.clone();
        if let Some(code) = close.code {
            if code.code() >= 0x80 && close.reason != CloseReason::ServerShutdown {
                b.metrics.protocol_error(code.code());
                tracing::debug!(
                    reason = close.reason.as_str(),
                    code = format_args!("{:#04x}", code.code()),
                    message = close.message.unwrap_or(""),
                    client_id = conn.core.session.as_ref().map(|s| &*s.client_id),
                    "closing connection"
                );
            }
        }
        conn.core.farewell(&b, &close);
        // One last attempt to write what is queued (the DISCONNECT, a refusing CONNACK); the
        // connection closes whether or not it succeeds.
        let _ = self.write_queued(t, gen, now);
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if conn.core.loc.gen != gen {
            return;
        }
        let mut conn = self.conns.remove(t);
        match &mut conn.io {
            Io::Tcp(s) => {
                let _ = self.poll.registry().deregister(s);
            }
            Io::Ws(w) => {
                let _ = self.poll.registry().deregister(w.get_mut());
            }
            Io::Handshake(Some(m)) => {
                let _ = self.poll.registry().deregister(m.get_mut().get_mut());
            }
            Io::Handshake(None) => {}
        }
        conn.core.closed(&b, close.reason, now);
        b.metrics.connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// Graceful stop: no more accepts; every connection gets DISCONNECT 0x8B (5.0), its
    /// queued bytes are written (briefly blocking), and it is closed.
    fn shutdown(&mut self) {
        for (_, l) in &mut self.listeners {
            let _ = self.poll.registry().deregister(l);
        }
        self.listeners.clear();
        let now = Instant::now();
        let tokens: Vec<(usize, u32)> = self
            .conns
            .iter()
            .map(|(t, c)| (t, c.core.loc.gen))
            .collect();
        for (t, gen) in tokens {
            let b = self.b.clone();
            if let Some(conn) = self.conns.get_mut(t) {
                let close = Close::new(
                    CloseReason::ServerShutdown,
                    Some(ballast_codec::ReasonCode::ServerShuttingDown),
                    "server shutting down",
                );
                conn.core.farewell(&b, &close);
                let _ = self.write_queued(t, gen, now);
                if let Some(conn) = self.conns.get_mut(t) {
                    drain_blocking(conn);
                }
                self.close(t, gen, close, now);
            }
        }
    }
}

/// Writes `pending` until done or the socket would block; returns the bytes written.
fn write_out(conn: &mut Conn) -> io::Result<usize> {
    let mut written = 0;
    match &mut conn.io {
        Io::Tcp(s) => {
            while written < conn.pending.len() {
                match s.write(&conn.pending[written..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            conn.pending.drain(..written);
        }
        Io::Ws(w) => {
            if !conn.pending.is_empty() {
                let data = std::mem::take(&mut conn.pending);
                written = data.len();
                match w.write(tungstenite::Message::Binary(data.into())) {
                    Ok(()) => {}
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io::Error::other(e.to_string())),
                }
            }
            match w.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Io::Handshake(_) => {}
    }
    Ok(written)
}

/// At shutdown: finish writing with a short blocking timeout.
fn drain_blocking(conn: &mut Conn) {
    if let Io::Tcp(s) = &mut conn.io {
        let sock = socket2::SockRef::from(&*s);
        let _ = sock.set_nonblocking(false);
        let _ = sock.set_write_timeout(Some(Duration::from_millis(200)));
        let _ = s.write_all(&conn.pending);
        conn.pending.clear();
    }
}

/// The close for a packet that failed to decode: DISCONNECT with the reason the spec names
/// for 5.0 (0x81 malformed, 0x82 protocol error, 0x95 too large, ...).
fn decode_close(b: &Broker, core: &Connection, e: &DecodeError) -> Close {
    let code = e.reason_code();
    let reason = match e {
        DecodeError::TooLarge { .. } => {
            b.metrics.limit(Limit::MaxPacketSize);
            CloseReason::PacketTooLarge
        }
        _ => CloseReason::ProtocolError,
    };
    let text = match e {
        DecodeError::Malformed(t) | DecodeError::Protocol(t) | DecodeError::Topic(t) => t,
        DecodeError::TooLarge { .. } => "packet too large",
        DecodeError::UnsupportedProtocol => "unsupported protocol version",
    };
    tracing::debug!(error = %e, protocol = ?core.protocol, "bad packet");
    Close {
        reason,
        code: Some(code),
        message: Some(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an idle connection holds in the loop's slab and its session, before any
    /// allocation of its own. The memory budget per idle connection is 0.5 KiB all told; keep
    /// these from growing unnoticed.
    #[test]
    fn per_connection_structs_stay_small() {
        let conn = std::mem::size_of::<Conn>();
        let session = std::mem::size_of::<crate::core::session::Session>();
        eprintln!("Conn: {conn} B, Session: {session} B");
        assert!(conn <= 120, "Conn grew to {conn} bytes");
        assert!(session <= 160, "Session grew to {session} bytes");
    }

    #[test]
    fn stamps_round_up_and_saturate() {
        let t0 = Instant::now();
        let w = Wheel::new(t0);
        assert_eq!(w.instant(w.stamp(t0)), t0);
        let t = t0 + Duration::from_millis(150);
        assert_eq!(w.instant(w.stamp(t)), t0 + Duration::from_millis(200));
        let t = t0 + Duration::from_millis(300);
        assert_eq!(w.instant(w.stamp(t)), t);
        let far = t0 + Duration::from_secs(20 * 365 * 86_400);
        assert!(w.instant(w.stamp(far)) > t0 + Duration::from_secs(13 * 365 * 86_400));
        assert_eq!(std::mem::size_of::<Option<Stamp>>(), 4);
    }

    #[test]
    fn wheel_returns_entries_once_their_tick_passes() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        w.insert(t0 + Duration::from_millis(250), 1, 1);
        w.insert(t0 + Duration::from_secs(500), 2, 1); // beyond the horizon: clamped
        let mut due = Vec::new();
        w.due(t0 + Duration::from_millis(150), &mut due);
        assert!(due.is_empty());
        w.due(t0 + Duration::from_millis(300), &mut due);
        assert_eq!(due, vec![(1, 1)]);
        due.clear();
        w.due(t0 + Duration::from_secs(103), &mut due);
        assert_eq!(
            due,
            vec![(2, 1)],
            "a far deadline comes back within one wheel turn"
        );
    }
}
