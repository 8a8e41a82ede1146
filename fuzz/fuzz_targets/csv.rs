//! See [`checks::data_file`].
#![no_main]
mod checks;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| checks::data_file("csv", bytes));
