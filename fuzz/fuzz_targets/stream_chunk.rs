//! The `chunk` of a `status: "stream"` callback (AI-SDK UI-message-stream parts), fuzzed inside
//! an otherwise valid body so every input reaches the chunk parser.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::protocol;
use stagewhisper_fuzz::{check_callback, TASK_ID};

fuzz_target!(|data: &[u8]| {
    let mut body = br#"{"session_id":"s","status":"stream","chunk":"#.to_vec();
    body.extend_from_slice(data);
    body.push(b'}');
    match protocol::parse_callback(TASK_ID, &body) {
        Ok(cb) => {
            assert!(cb.chunk.is_some());
            check_callback(TASK_ID, &cb);
        }
        // The input may close the chunk and add fields of its own (`"","task_id":"x"`), so any
        // of the body's refusals can come back — but only those.
        Err(e) => assert!(
            matches!(
                e.code(),
                "invalid_json"
                    | "invalid_chunk"
                    | "invalid_field"
                    | "invalid_status"
                    | "invalid_task_id"
                    | "missing_field"
                    | "task_id_mismatch"
                    | "empty_reply_text"
            ),
            "{}",
            e.code()
        ),
    }
});
