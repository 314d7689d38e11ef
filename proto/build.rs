//! Compiles `tether/v1/tether.proto` with protox (a Rust protobuf compiler), so
//! building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=tether/v1/tether.proto");
    let descriptors = protox::compile(["tether/v1/tether.proto"], ["."])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
