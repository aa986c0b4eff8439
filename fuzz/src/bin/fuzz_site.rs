//! libFuzzer entry point of [`lop_fuzz::site`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lop_fuzz::site(data));
