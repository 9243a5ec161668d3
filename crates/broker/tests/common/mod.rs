//! Helpers shared by the broker's integration tests (see `test_support::mqtt`).

#![allow(unused_imports)]

pub use test_support::mqtt::*;
