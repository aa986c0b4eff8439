//! Generates the ONNX protobuf types from `proto/onnx.proto` with protox (a pure-Rust protobuf
//! compiler, so no `protoc` is needed) and prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
