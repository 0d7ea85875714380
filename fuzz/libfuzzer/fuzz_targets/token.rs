//! `cargo fuzz run --fuzz-dir fuzz/libfuzzer token`: see `railyard_fuzz::bytes`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(finding) = railyard_fuzz::bytes::run("token", data) {
        panic!("{finding}");
    }
});
