//! Compiles `tether/v1/tether.proto` with protox (a Rust protobuf compiler), so
//! building needs no `protoc` on the machine. Also writes the encoded file
//! descriptor set, which the sidecar serves over gRPC reflection.

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=tether/v1/tether.proto");
    let descriptors = protox::compile(["tether/v1/tether.proto"], ["."])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("tether_v1_descriptor.bin"), descriptors.encode_to_vec())?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
