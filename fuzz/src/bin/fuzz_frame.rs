//! libFuzzer entry point of [`lop_fuzz::frame`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lop_fuzz::frame(data));
