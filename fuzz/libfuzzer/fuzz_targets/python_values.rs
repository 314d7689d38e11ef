//! libFuzzer over `tether_fuzz_checks::python_values` (`fuzz/checks/src/python_values.rs`
//! says what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz_checks::python_values::check(data));
