//! The guest side of Tether: what a `wasm32-wasip1` guest uses to read its run,
//! call the turn's tools and report its result.
//!
//! The wire format is the `tether_v1` ABI documented in `guest-sdk/README.md`:
//! JSON documents passed through five host imports. [`wire`] holds the
//! documents (usable on any target, so hosts and tests share them); the calls
//! that need the host (`start`, `call`, `call_batch`, `call_batch_parkable`,
//! `finish`) exist only on `wasm32`.

pub mod wire;

#[cfg(target_arch = "wasm32")]
mod host;

#[cfg(target_arch = "wasm32")]
pub use host::{call, call_batch, call_batch_parkable, finish, start};
pub use wire::{
    CallAnswer, CallBatch, CallRequest, CallResult, CallResults, Failure, Outcome, ParkAsk, ParkDoc, Resume,
    ScriptError, StartDoc, ToolDoc, ToolSchema,
};

/// The ABI version this crate speaks; also the suffix of the import module name.
pub const ABI_VERSION: u32 = 1;

/// The name of the host-import module.
pub const IMPORT_MODULE: &str = "tether_v1";

/// The custom section by which a guest says it reads only each tool's
/// `name` from the start document. The host then leaves out every tool's
/// `description` and `input_schema`, which it would otherwise check and copy
/// into every run: MCP tools bring schemas of kilobytes. Declare it with
/// [`reads_tool_names_only!`]; the section's content does not matter.
pub const TOOL_NAMES_ONLY_SECTION: &str = "tether_v1.tool_names_only";

/// Declares [`TOOL_NAMES_ONLY_SECTION`] in the guest module: put it once in
/// the guest's binary crate. The start document's tools then carry their
/// names alone (`description` empty, `input_schema` null).
#[macro_export]
macro_rules! reads_tool_names_only {
    () => {
        #[cfg(target_arch = "wasm32")]
        #[used]
        #[unsafe(link_section = "tether_v1.tool_names_only")]
        static TETHER_V1_TOOL_NAMES_ONLY: [u8; 1] = [1];
    };
}

/// The custom section by which a guest says it reads each tool's `name`,
/// and the `input_schema` only of the tools whose name its script's source
/// contains: the Python runtime, which checks the calls a script makes of a
/// tool against that tool's schema before the script runs. The host then
/// leaves out every `description`, and the schema of every tool the source
/// does not name (a resuming start, which runs no check, gets no schema).
/// It takes precedence over [`TOOL_NAMES_ONLY_SECTION`]. Declare it with
/// [`reads_tool_schemas_if_named!`]; the section's content does not matter.
pub const TOOL_SCHEMAS_IF_NAMED_SECTION: &str = "tether_v1.tool_schemas_if_named";

/// Declares [`TOOL_SCHEMAS_IF_NAMED_SECTION`] in the guest module: put it
/// once in the guest's binary crate. The start document's tools then carry
/// their names, `description` empty, and `input_schema` null unless the
/// script's source contains the tool's name.
#[macro_export]
macro_rules! reads_tool_schemas_if_named {
    () => {
        #[cfg(target_arch = "wasm32")]
        #[used]
        #[unsafe(link_section = "tether_v1.tool_schemas_if_named")]
        static TETHER_V1_TOOL_SCHEMAS_IF_NAMED: [u8; 1] = [1];
    };
}

/// The custom section by which a guest says it can park: when the host asks
/// (`call` answers `{"park": …}`) it hands over its suspended state with
/// `tether_v1.park`, and resumes from it when a later start carries
/// `resume`. The host asks no other guest to park. Its content is one byte,
/// [`PARK_FORMAT_VERSION`]. Declare it with [`parks!`].
pub const PARKS_SECTION: &str = "tether_v1.parks";

/// The version of the parking protocol a guest declaring [`PARKS_SECTION`]
/// speaks: the section's one byte.
pub const PARK_FORMAT_VERSION: u8 = 1;

/// Declares [`PARKS_SECTION`] in the guest module: put it once in the
/// guest's binary crate, which must then wait on tools with
/// `call_batch_parkable` and resume from `StartDoc::resume`.
#[macro_export]
macro_rules! parks {
    () => {
        #[cfg(target_arch = "wasm32")]
        #[used]
        #[unsafe(link_section = "tether_v1.parks")]
        static TETHER_V1_PARKS: [u8; 1] = [$crate::PARK_FORMAT_VERSION];
    };
}
