//! libFuzzer entry point of [`lop_fuzz::band`] (its plans built first: [`lop_fuzz::prepare`]).
#![no_main]

libfuzzer_sys::fuzz_target!(init: lop_fuzz::prepare("band"), |data: &[u8]| lop_fuzz::band(data));
