//! See [`checks::kb_import`].
#![no_main]
mod checks;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| checks::kb_import(bytes));
