//! The gRPC contract between an agent backend and the Tether sidecar.
//!
//! Everything is generated from `proto/tether/v1/tether.proto`, which documents
//! every message and field. Use it through the short name [`pb`].

/// Generated code for package `tether.v1`.
#[rustfmt::skip]
#[allow(missing_docs, unreachable_pub, missing_debug_implementations, clippy::all)]
pub mod pb {
    tonic::include_proto!("tether.v1");
}

/// The encoded `FileDescriptorSet` of `tether.v1` (with its source comments),
/// for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tether_v1_descriptor.bin"));

/// The protocol name a sidecar reports in `Describe`.
pub const PROTOCOL: &str = "tether.v1";
