//! The ONNX protobuf messages, generated at build time from `lop/proto/onnx.proto`.
#![allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]

include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
