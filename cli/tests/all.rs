//! The `lop` command end to end.
//!
//! One test binary for the crate (`autotests = false` in its Cargo.toml): each file of this folder
//! is a module of it, so that the test build links zenoh and libtorch once per crate instead of
//! once per file.

mod bench_cli;
mod cli;
