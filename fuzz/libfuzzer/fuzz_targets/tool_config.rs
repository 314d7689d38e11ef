//! libFuzzer over `tether_fuzz_checks::tool_config` (`fuzz/checks/src/tool_config.rs`
//! says what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz_checks::tool_config::check(data));
