//! See [`checks::config`].
#![no_main]
mod checks;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| checks::config(bytes));
