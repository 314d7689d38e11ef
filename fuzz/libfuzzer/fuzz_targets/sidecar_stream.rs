//! libFuzzer over `tether_fuzz_checks::sidecar_stream` (`fuzz/checks/src/sidecar_stream.rs`
//! says what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz_checks::sidecar_stream::check(data));
