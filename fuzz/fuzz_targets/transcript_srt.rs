//! SRT transcript files: the parser never panics, what it accepts is well formed, and the cues
//! written back as SRT parse to the same cues.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::transcript::{self, Format};
use stagewhisper_fuzz::{check_cues, essence, write_srt};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Format::detect(std::path::Path::new("t"), text);
    let Ok(cues) = transcript::parse(text, Format::Srt) else {
        return;
    };
    check_cues(text, &cues);
    let written = write_srt(&cues);
    let back = transcript::parse(&written, Format::Srt)
        .unwrap_or_else(|e| panic!("written back: {e}\n{written}"));
    assert_eq!(
        essence(&back),
        essence(&cues),
        "round trip through\n{written}"
    );
});
