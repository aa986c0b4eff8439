//! Generates the ONNX protobuf types from `proto/onnx.proto` with protox (a pure-Rust protobuf
//! compiler, so no `protoc` is needed) and prost-build; records the libtorch version it is built
//! against (`LOP_LIBTORCH_BUILT`, read by `lop::libtorch`) and refuses one outside the supported
//! range by name; compiles the C++ shim `csrc/pointwise.cpp` (oneDNN's prepacked convolution).

use std::process::Command;

#[path = "../core/src/libtorch.rs"]
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
    build_shim();
    build_dnnl_shim();
    Ok(())
}

/// Compiles `csrc/dnnl_conv.cpp` and `csrc/dnnl_linear.cpp` (convolutions, pooling and linear
/// layers straight on oneDNN's C API) where oneDNN's headers
/// are found, and says so to the crate (`cfg(lop_onednn)`, and `LOP_ONEDNN_LIB_BUILT`: the
/// library beside those headers, opened at run time). The headers come from the
/// `onednn-devel-cpu-gomp` wheel `scripts/setup.sh` installs into the venv that holds torch, or
/// from `LOP_ONEDNN_PREFIX` (a folder with `include/` and `lib/`). Without them lop still builds,
/// and convolutions take libtorch's route.
fn build_dnnl_shim() {
    println!("cargo::rustc-check-cfg=cfg(lop_onednn)");
    for file in ["csrc/dnnl_conv.cpp", "csrc/dnnl_linear.cpp", "csrc/dnnl_shim.h"] {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-env-changed=LOP_ONEDNN_PREFIX");
    let Some(prefix) = onednn_prefix() else {
        println!("cargo:warning=oneDNN's headers not found (scripts/setup.sh installs them on x86_64): convolutions take libtorch's route");
        return;
    };
    println!("cargo:rerun-if-changed={}", prefix.join("include/oneapi/dnnl/dnnl.h").display());
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(prefix.join("include"))
        .flag("-std=c++17")
        .file("csrc/dnnl_conv.cpp")
        .file("csrc/dnnl_linear.cpp")
        .compile("lop_dnnl_conv");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-cfg=lop_onednn");
    println!("cargo:rustc-env=LOP_ONEDNN_LIB_BUILT={}", prefix.join("lib/libdnnl.so.3").display());
}

/// The folder holding `include/oneapi/dnnl/dnnl.h` and `lib/libdnnl.so.3`: `LOP_ONEDNN_PREFIX`,
/// else the first folder above libtorch's `lib` (a venv's `site-packages/torch/lib`) that has
/// both. (The torch wheel's own `include` has oneDNN's headers of its private copy, but no
/// library beside them: it is not taken.)
fn onednn_prefix() -> Option<std::path::PathBuf> {
    let has = |p: &std::path::Path| p.join("include/oneapi/dnnl/dnnl.h").is_file() && p.join("lib/libdnnl.so.3").is_file();
    if let Some(p) = std::env::var_os("LOP_ONEDNN_PREFIX").map(std::path::PathBuf::from) {
        return has(&p).then_some(p);
    }
    let lib = std::path::PathBuf::from(std::env::var_os("DEP_TCH_LIBTORCH_LIB")?);
    lib.ancestors().take(6).find(|p| has(p)).map(std::path::Path::to_path_buf)
}

/// Compiles `csrc/pointwise.cpp` (oneDNN's prepacked convolution, which tch does not wrap) against
/// the libtorch torch-sys links (`DEP_TCH_LIBTORCH_LIB`: its `lib` folder), with torch-sys's own
/// headers and flags.
fn build_shim() {
    println!("cargo:rerun-if-changed=csrc/pointwise.cpp");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB").map(std::path::PathBuf::from) else {
        eprintln!("error: torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB)");
        std::process::exit(1);
    };
    // Where torch-sys takes the headers from: a torch wheel's `torch/include` beside its
    // `torch/lib` (LIBTORCH_USE_PYTORCH), else LIBTORCH_INCLUDE, else LIBTORCH.
    println!("cargo:rerun-if-env-changed=LIBTORCH_INCLUDE");
    let beside = lib.parent().map(std::path::Path::to_path_buf);
    let base = if std::env::var_os("LIBTORCH_USE_PYTORCH").is_some() {
        beside
    } else {
        std::env::var_os("LIBTORCH_INCLUDE").or_else(|| std::env::var_os("LIBTORCH")).map(std::path::PathBuf::from).or(beside)
    }
    .unwrap_or_default();
    let include = base.join("include");
    let abi = if cxx11_abi() { "1" } else { "0" };
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .file("csrc/pointwise.cpp")
        .compile("lop_pointwise");
}

/// Whether libtorch was built with the C++11 ABI, as torch-sys decides (`LIBTORCH_CXX11_ABI`, else
/// yes: every torch 2.x wheel is).
fn cxx11_abi() -> bool {
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    std::env::var("LIBTORCH_CXX11_ABI").map_or(true, |v| v != "0")
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
