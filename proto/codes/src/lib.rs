//! Every failure code of Tether, defined once.
//!
//! - [`Code`]: why a tool call produced no value — the stable machine code a
//!   script, the model, the audit log and the events all see, and its display
//!   name. The sidecar, the turn, the client and the guests use this one list.
//! - [`Reason`]: a code together with the facts its message needs; its
//!   `Display` is the message, written for the model that reads it. Each
//!   message sits next to its code here, nowhere else.
//! - [`RunErrorKind`]: why a whole run failed (`Finished.error.kind`).
//! - [`string_enum!`]: how `Code`, `RunErrorKind` and the turn's other named
//!   sets are defined: each variant's stable name written once, with `as_str`, `ALL`,
//!   `parse`, `Display` and `FromStr` ([`UnknownName`]) generated from it.
//!
//! This crate has no dependencies beyond `thiserror`, so a `wasm32` guest can
//! use it too.

mod code;
mod reason;
mod run_error;
mod string_enum;

pub use code::Code;
pub use reason::Reason;
pub use run_error::RunErrorKind;
pub use string_enum::UnknownName;

#[doc(hidden)]
pub use string_enum::assert_distinct as __assert_distinct;
