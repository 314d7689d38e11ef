//! libFuzzer over `tether_fuzz_checks::parked_state` (`fuzz/checks/src/parked_state.rs`
//! says what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz_checks::parked_state::check(data));
