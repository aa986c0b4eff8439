//! libFuzzer entry point of [`lop_fuzz::hello`] (its model and profiles built first: [`lop_fuzz::prepare`]).
#![no_main]

libfuzzer_sys::fuzz_target!(init: lop_fuzz::prepare("hello"), |data: &[u8]| lop_fuzz::hello(data));
