//! clawborrator hub `/cli` text frames (`clawborrator::frames::parse_hub_frame`): never panics; a frame
//! reads the same from its JSON written again; an event's content key (the replay dedupe key)
//! is the same for the same event.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::assistants::kinds::clawborrator::frames::{parse_hub_frame, HubFrame};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(frame) = parse_hub_frame(text) else {
        return;
    };
    let v: serde_json::Value = serde_json::from_str(text).expect("accepted as JSON");
    // serde_json does not round every float it reads correctly (a 70-digit integer, say), so a
    // value with such a number reads back different from itself: no round trip to check then.
    if serde_json::from_str::<serde_json::Value>(&v.to_string())
        .ok()
        .as_ref()
        != Some(&v)
    {
        return;
    }
    let again = parse_hub_frame(&v.to_string()).expect("written again");
    assert_eq!(again, frame);
    if let (HubFrame::Event { event: a, .. }, HubFrame::Event { event: b, .. }) = (&frame, &again) {
        assert_eq!(a.content_key(), b.content_key());
        let _ = (a.text(), a.chat_id(), a.tool(), a.author());
    }
});
