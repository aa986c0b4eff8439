//! libFuzzer entry point of [`lop_fuzz::picture`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lop_fuzz::picture(data));
