//! libFuzzer entry point of [`lop_fuzz::ros`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lop_fuzz::ros(data));
