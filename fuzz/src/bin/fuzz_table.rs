//! libFuzzer entry point of [`lop_fuzz::table`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lop_fuzz::table(data));
