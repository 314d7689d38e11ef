//! The sidecar client: the backend's side of the gRPC stream a script's
//! calls travel over, and `run_script`, the tool that joins it to a turn.
//!
//! Where things are:
//! - `client`: [`SidecarClient`] — connect (TCP with TLS, or a Unix socket),
//!   open a run's stream, serve its calls until the run ends
//! - `handler`: [`CallHandler`], the trait through which a backend answers
//!   every call a script makes
//! - `outcome`: [`RunOutcome`], how a run ended
//! - `error`: [`ClientError`], why a run could not be carried out
//! - `script`: [`ScriptTool`], the script tool `run_script` — the ONE place
//!   the turn meets the transport: every call the script makes goes through
//!   [`Turn::execute`](tether_turn::Turn::execute) like the model's own
//!
//! The client depends on the turn (`tether-turn`), never the reverse.

mod client;
mod error;
mod handler;
mod outcome;
mod script;

pub use client::{ClientAuth, ClientTls, ConnectOptions, Keepalive, RunRequest, SidecarClient};
pub use error::ClientError;
pub use handler::{CallHandler, RefusedCall, ScriptCall, ToolOutcome};
pub use outcome::{HandedOff, RunOutcome};
pub use script::{Answers, Resumed, SCRIPT_TOOL_NAME, ScriptTool};
