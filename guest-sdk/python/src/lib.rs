//! The Python runtime of Tether, as a library: everything the
//! `tether-python` guest binary does except talk to the host.
//!
//! The guest (`main.rs`) reads the start document, hands it to
//! [`runner::run_parkable`] with `tether_guest::call_batch_parkable` as the
//! way out, and reports
//! the [`Outcome`](tether_guest::Outcome). Keeping the host out of this crate's
//! library lets the whole run loop build and be tested natively with a fake
//! host (`cargo test -p tether-python`).

pub mod api;
pub mod check;
pub mod convert;
pub mod differences;
pub mod errors;
pub mod output;
pub mod park;
pub mod runner;
pub mod sandbox;
pub mod sleep;
pub mod traceback;
