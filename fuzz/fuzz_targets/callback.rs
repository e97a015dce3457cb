//! `POST /tasks/{task_id}` bodies: `protocol::parse_callback` never panics, and an accepted
//! callback written back as JSON parses to the same callback.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::protocol;
use stagewhisper_fuzz::{check_callback, TASK_ID};

fuzz_target!(|data: &[u8]| {
    if let Ok(cb) = protocol::parse_callback(TASK_ID, data) {
        check_callback(TASK_ID, &cb);
    }
    // The path's task id is checked on its own, before the body.
    if let Ok(s) = std::str::from_utf8(&data[..data.len().min(40)]) {
        if let Ok(t) = protocol::parse_task_id(s) {
            assert!(protocol::is_uuid(&t) && t.len() == 36);
        }
    }
});
