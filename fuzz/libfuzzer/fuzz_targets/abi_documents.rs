//! libFuzzer over `tether_fuzz_checks::abi_documents` (`fuzz/checks/src/abi_documents.rs`
//! says what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz_checks::abi_documents::check(data));
