//! OpenClaw Gateway WebSocket text frames (`openclaw_gateway::frames`). What the gateway sends
//! (`parse_inbound`) never panics, reads the same from its parsed value and from that value
//! written again, and its payloads (`hello-ok`, `chat.history`) are read without panicking. What
//! the client sends (`parse_outbound`, closed types) written back parses to the same request.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use stagewhisper_core::assistants::kinds::openclaw_gateway::frames::{
    parse_inbound, parse_inbound_value, parse_outbound, HelloOk, History, HistoryFinding, Inbound,
    Outbound, Request,
};

fn outbound_text(id: &str, out: &Outbound, params: Value) -> Option<String> {
    let (method, params) = match out {
        Outbound::Connect(p) => ("connect", serde_json::to_value(p).ok()?),
        Outbound::ChatSend(p) => ("chat.send", serde_json::to_value(p).ok()?),
        Outbound::ChatAbort(p) => ("chat.abort", serde_json::to_value(p).ok()?),
        Outbound::ChatHistory(p) => ("chat.history", serde_json::to_value(p).ok()?),
        Outbound::Other { method } => (method.as_str(), params),
    };
    serde_json::to_string(&Request::new(id, method, params)).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(inbound) = parse_inbound(text) {
        let v: Value = serde_json::from_str(text).expect("parse_inbound accepted it as JSON");
        assert_eq!(parse_inbound_value(v.clone()).ok().as_ref(), Some(&inbound));
        // Written again, unless serde_json itself reads the value back different (it does not
        // round every float it reads correctly).
        if serde_json::from_str::<Value>(&v.to_string()).ok().as_ref() == Some(&v) {
            let again = parse_inbound(&v.to_string()).expect("written again");
            assert_eq!(again, inbound);
        }
        if let Inbound::Response(r) = &inbound {
            if let Ok(payload) = &r.result {
                let _ = HelloOk::from_payload(payload);
                if let Ok(h) = History::from_payload(payload) {
                    for m in &h.messages {
                        let _ = m.text();
                        for key in [m.run_id(), m.user_key()].into_iter().flatten() {
                            if let HistoryFinding::Replied { text } = h.find(key) {
                                assert!(!text.is_empty());
                            }
                        }
                    }
                }
            } else if let Err(e) = &r.result {
                let _ = e.detail_code();
            }
        }
        if let Inbound::Chat(c) = &inbound {
            let _ = c.state.is_terminal();
        }
    }
    // The same for what the client sends (attachments are free JSON).
    let stable = serde_json::from_str::<Value>(text)
        .is_ok_and(|v| serde_json::from_str::<Value>(&v.to_string()).ok() == Some(v));
    if let (true, Ok((id, out))) = (stable, parse_outbound(text)) {
        let params = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v.get("params").cloned())
            .unwrap_or(Value::Null);
        let written = outbound_text(&id, &out, params).expect("outbound frames serialize");
        let (id2, out2) =
            parse_outbound(&written).unwrap_or_else(|e| panic!("written back ({e}): {written}"));
        assert_eq!((id2, out2), (id, out));
    }
});
