//! Generates the ONNX protobuf types from `proto/onnx.proto` with protox (a pure-Rust protobuf
//! compiler, so no `protoc` is needed) and prost-build; records the libtorch version it is built
//! against (`LOP_LIBTORCH_BUILT`, read by `lop::libtorch`) and refuses one outside the supported
//! range by name.

use std::process::Command;

#[path = "src/libtorch/range.rs"]
mod range;
use range::{MAJOR, MINORS};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;

    let (version, source) = libtorch_version();
    if let Some(version) = &version
        && !range::in_range(version)
    {
        // Printed as it is (an `Err` from main would be shown quoted, with escapes).
        eprintln!(
            "error: libtorch {version} ({source}) is outside the range lop supports, {MAJOR}.{}.x to {MAJOR}.{}.x (tch 0.26): \
             install torch==2.13.0 (scripts/setup.sh) and `. scripts/env.sh`; docs/jetson.md lists the versions tried and what fails",
            MINORS.start(),
            MINORS.end()
        );
        std::process::exit(1);
    }
    println!("cargo:rustc-env=LOP_LIBTORCH_BUILT={}", version.unwrap_or_default());
    Ok(())
}

/// The libtorch version torch-sys builds against, found as torch-sys finds libtorch: the torch of
/// the Python it asks (`LIBTORCH_USE_PYTORCH`), or a libtorch folder's `build-version`
/// (`LIBTORCH`). `None` where neither tells (a folder without the file).
fn libtorch_version() -> (Option<String>, String) {
    for var in ["LIBTORCH_USE_PYTORCH", "LIBTORCH", "VIRTUAL_ENV"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if std::env::var_os("LIBTORCH_USE_PYTORCH").is_some() {
        let python = if std::env::var_os("VIRTUAL_ENV").is_some() { "python" } else { "python3" };
        let out = Command::new(python).args(["-c", "import torch; print(torch.__version__)"]).output();
        let version = out.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        return (version.filter(|v| !v.is_empty()), format!("the torch of `{python}`, LIBTORCH_USE_PYTORCH"));
    }
    if let Some(dir) = std::env::var_os("LIBTORCH") {
        let file = std::path::Path::new(&dir).join("build-version");
        println!("cargo:rerun-if-changed={}", file.display());
        let version = std::fs::read_to_string(&file).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        return (version, format!("{}", file.display()));
    }
    (None, String::new())
}
