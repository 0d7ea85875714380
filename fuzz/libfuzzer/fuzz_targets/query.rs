//! `cargo fuzz run --fuzz-dir fuzz/libfuzzer query`: see `railyard_fuzz::bytes`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(finding) = railyard_fuzz::bytes::run("query", data) {
        panic!("{finding}");
    }
});
