//! libFuzzer entry point of [`lop_fuzz::table`] (its model loaded first: [`lop_fuzz::prepare`]).
#![no_main]

libfuzzer_sys::fuzz_target!(init: lop_fuzz::prepare("table"), |data: &[u8]| lop_fuzz::table(data));
