//! Renaming a call's speaker, black-box on the real binary (no audio needed: the turns are
//! posted as the pipeline stores them): every turn of the speaker follows in the transcript and
//! the export, during the call and after it, across a restart; the refusals have stable codes;
//! the voiceprint list and its refusals. (A voice told apart by the speaker model, and its
//! voiceprint in the next call: `hearing_speakers.rs`.)

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::*;
use serde_json::{json, Value};

async fn turn(ui: &UiClient, call: &str, speaker: &str, text: &str) {
    let r = ui
        .post(
            &format!("/api/calls/{call}/transcript"),
            &json!({"speaker": speaker, "text": text}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
}

async fn rename(ui: &UiClient, call: &str, label: &str, body: &Value) -> Resp {
    let label = label.replace(' ', "%20");
    ui.request(
        "PUT",
        &format!("/api/calls/{call}/speakers/{label}"),
        Some(&ui.token),
        Some(body),
    )
    .await
}

async fn speakers(ui: &UiClient, call: &str) -> Vec<String> {
    let r = ui.get(&format!("/api/calls/{call}/transcript")).await;
    r.json
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["speaker"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaker_names_follow_every_turn_during_and_after_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = App::launch(dir.path().to_path_buf(), vec![], &[]).await;
    let ui = app.ui();
    let r = ui.post("/api/calls", &json!({"title": "renewal"})).await;
    let call = r.json["session_id"].as_str().unwrap().to_string();
    turn(&ui, &call, "Speaker 1", "We need a discount").await;
    turn(&ui, &call, "Speaker 2", "Not below list price").await;
    turn(&ui, &call, "You", "Let me check").await;
    turn(&ui, &call, "Speaker 1", "Then we walk").await;

    let r = rename(
        &ui,
        &call,
        "Speaker 1",
        &json!({"name": " Dana (Acme CFO) "}),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["turns"], 2, "{r}");
    assert_eq!(r.json["name"], "Dana (Acme CFO)", "{r}");
    assert_eq!(
        r.json["voiceprint"],
        Value::Null,
        "no voice was told apart: {r}"
    );
    let want = ["Dana (Acme CFO)", "Speaker 2", "You", "Dana (Acme CFO)"];
    assert_eq!(speakers(&ui, &call).await, want);
    // A turn of the old name stored after the rename (labelled while it was decided) follows.
    turn(&ui, &call, "Speaker 1", "Final offer").await;
    assert_eq!(speakers(&ui, &call).await[4], "Dana (Acme CFO)");

    // Refusals, nothing changed.
    for bad in [
        json!({"name": "  "}),
        json!({"name": "a\u{7}b"}),
        json!({"name": "x".repeat(101)}),
        json!({}),
    ] {
        let r = rename(&ui, &call, "Speaker 2", &bad).await;
        assert_eq!(r.status, 400, "{bad} {r}");
    }
    let r = rename(&ui, &call, "Speaker 9", &json!({"name": "Zed"})).await;
    assert_error(&r, 404, "speaker_not_found");
    let r = rename(&ui, "no-such-call", "Speaker 2", &json!({"name": "Zed"})).await;
    assert_error(&r, 404, "session_not_found");
    let chat = ui.post("/api/sessions", &json!({})).await.json["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = rename(&ui, &chat, "Speaker 2", &json!({"name": "Zed"})).await;
    assert_error(&r, 409, "not_a_call");

    // After the call: still renamed, and the export follows.
    let r = ui.post(&format!("/api/calls/{call}/end"), &json!({})).await;
    assert_eq!(r.status, 200, "{r}");
    let r = rename(&ui, &call, "Speaker 2", &json!({"name": "Eve"})).await;
    assert_eq!((r.status, r.json["turns"].as_u64()), (200, Some(1)), "{r}");
    let export = ui
        .get(&format!("/api/sessions/{call}/export?format=json"))
        .await;
    let text = export.json.to_string();
    assert!(
        text.contains("Dana (Acme CFO)") && text.contains("Eve"),
        "{text}"
    );
    assert!(
        !text.contains("Speaker 1") && !text.contains("Speaker 2"),
        "{text}"
    );

    // Durable: the same after a restart.
    app.restart().await;
    let ui = app.ui();
    let want = [
        "Dana (Acme CFO)",
        "Eve",
        "You",
        "Dana (Acme CFO)",
        "Dana (Acme CFO)",
    ];
    assert_eq!(speakers(&ui, &call).await, want);

    // No voice was told apart: no voiceprint; forgetting an unknown one is a 404.
    let r = ui.get("/api/voiceprints").await;
    assert_eq!((r.status, r.json.clone()), (200, json!([])), "{r}");
    let r = ui.delete("/api/voiceprints/nope").await;
    assert_error(&r, 404, "voiceprint_not_found");
}
