//! Work on a clock rather than on packets: wills whose delay passed, sessions whose expiry
//! passed, and the `$SYS/broker/...` topics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_codec::QoS;
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::core::message::Message;
use crate::core::Broker;

#[derive(Default)]
pub struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    pub fn stop(&self) {
        *self.stopped.lock() = true;
        self.cv.notify_all();
    }

    /// Waits up to `d`; returns true when stopped.
    fn wait(&self, d: Duration) -> bool {
        let mut s = self.stopped.lock();
        if !*s {
            self.cv.wait_for(&mut s, d);
        }
        *s
    }
}

const TICK: Duration = Duration::from_millis(250);

pub fn run(b: Arc<Broker>, stop: Arc<Stop>) {
    let sys_every = Duration::from_secs(b.config.sys_interval_secs);
    let mut next_sys = Instant::now();
    while !stop.wait(TICK) {
        let now = Instant::now();
        b.expire_sessions(now);
        if !sys_every.is_zero() && now >= next_sys {
            publish_sys(&b, now);
            next_sys = now + sys_every;
        }
        crate::core::journal::kick(b.writer.as_ref());
    }
}

/// Publishes the broker's figures as retained QoS 0 messages under `$SYS/broker/`.
fn publish_sys(b: &Broker, now: Instant) {
    let m = b.metrics.snapshot();
    let figures: [(&str, String); 10] = [
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        (
            "uptime",
            format!("{}", now.duration_since(b.started).as_secs()),
        ),
        ("clients/connected", m.connections.to_string()),
        ("clients/total", m.sessions.to_string()),
        ("messages/received", m.messages_received.to_string()),
        ("messages/sent", m.messages_sent.to_string()),
        ("bytes/received", m.bytes_received.to_string()),
        ("bytes/sent", m.bytes_sent.to_string()),
        ("subscriptions/count", m.subscriptions.to_string()),
        ("retained messages/count", m.retained_messages.to_string()),
    ];
    for (name, value) in figures {
        let topic = format!("$SYS/broker/{name}");
        let msg = Arc::new(Message::new(
            &topic,
            Bytes::from(value),
            QoS::AtMostOnce,
            true,
        ));
        b.retain(&msg, now);
        b.publish(msg, now);
    }
}
