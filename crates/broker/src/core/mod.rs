//! The protocol core: plain code with no sockets.
//!
//! `Connection` takes decoded packets and the current time, checks them against the
//! specification and the configured limits, and acts on the shared `Broker` state: it writes
//! encoded packets into session outboxes and returns a `Close` when the connection must end.
//! The loop threads in `server` move bytes and call it.

pub mod broker;
pub mod connection;
pub mod journal;
pub mod message;
pub mod session;

pub use broker::{set_current_worker, Broker, Cmd, Inbox};
pub use connection::{Close, Connection, Phase};
pub use session::ConnLoc;
