//! libFuzzer entry point of [`lop_fuzz::config`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lop_fuzz::config(data));
