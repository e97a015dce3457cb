//! The callback listener (assistant → desktop), black-box against docs/contract.md.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Statuses
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn message_notice_errored_and_legacy_completed_are_shown() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let task = new_id();
    let occurred = now_micros() - 5_000_000;

    let r = app
        .post(&with(
            message(&sid, &task, "m-1", "Hello from the assistant"),
            json!({"user_message_id": "um-1", "occurred_at": rfc3339(occurred)}),
        ))
        .await;
    assert_applied(&r);
    assert_eq!(r.json, json!({"ok": true}), "applied answer: {r}");

    let r = app
        .post(&with(
            status_body(&sid, &task, "notice"),
            json!({"message_id": "n-1", "reply_text": "Looking that up…", "user_message_id": "um-1"}),
        ))
        .await;
    assert_applied(&r);

    let r = app
        .post(&with(
            status_body(&sid, &task, "errored"),
            json!({"error_code": "agent_failed", "error_message": "The agent crashed", "user_message_id": "um-1"}),
        ))
        .await;
    assert_applied(&r);

    // A legacy `completed` carrying text is stored as a message too.
    let task2 = new_id();
    let r = app
        .post(&with(
            status_body(&sid, &task2, "completed"),
            json!({"message_id": "c-1", "reply_text": "Legacy final text", "user_message_id": "um-2"}),
        ))
        .await;
    assert_applied(&r);

    // completed / silent without text add nothing.
    assert_accepted(&app.post(&status_body(&sid, &new_id(), "completed")).await);
    assert_accepted(&app.post(&status_body(&sid, &new_id(), "silent")).await);

    let msgs = app.messages(&sid).await;
    let dump = app.dump(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec![
            "Hello from the assistant",
            "Looking that up…",
            "The agent crashed",
            "Legacy final text"
        ],
        "conversation:\n{dump}"
    );
    let kinds: Vec<&str> = msgs
        .iter()
        .map(|m| m["kind"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        vec!["assistant", "notice", "error", "assistant"],
        "{dump}"
    );

    // The message shape.
    let m = &msgs[0];
    for key in [
        "id",
        "session_id",
        "kind",
        "text",
        "message_id",
        "task_id",
        "user_message_id",
        "error_code",
        "occurred_at",
        "received_at",
        "sort_key",
        "draft",
    ] {
        assert!(m.get(key).is_some(), "message lacks `{key}`: {m}");
    }
    assert_eq!(m["session_id"], sid.as_str(), "{m}");
    assert_eq!(m["message_id"], "m-1", "{m}");
    assert_eq!(m["task_id"], task.as_str(), "{m}");
    assert_eq!(m["user_message_id"], "um-1", "{m}");
    assert_eq!(m["draft"], false, "{m}");
    assert_eq!(
        m["sort_key"],
        json!(occurred),
        "sort_key = occurred_at in µs: {m}"
    );
    assert_eq!(m["occurred_at"], rfc3339(occurred).as_str(), "{m}");
    assert!(
        is_time_micros(&m["received_at"]),
        "received_at: RFC 3339 UTC with µs: {m}"
    );
    assert!(is_time_micros(&m["occurred_at"]), "{m}");
    assert_eq!(msgs[2]["error_code"], "agent_failed", "{dump}");
}

#[tokio::test]
async fn errored_is_deduped_and_keeps_an_earlier_reply() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let task = new_id();
    assert_applied(
        &app.post(&with(
            message(&sid, &task, "m-ok", "Here is your answer"),
            json!({"user_message_id": "um-e"}),
        ))
        .await,
    );
    let err = with(
        status_body(&sid, &task, "errored"),
        json!({"error_code": "timeout", "error_message": "Run exceeded 30 s", "user_message_id": "um-e"}),
    );
    assert_applied(&app.post(&err).await);
    assert_duplicate(&app.post(&err).await);
    // Another error text of the same task is a different entry.
    assert_applied(
        &app.post(&with(
            err.clone(),
            json!({"error_message": "Second failure"}),
        ))
        .await,
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec!["Here is your answer", "Run exceeded 30 s", "Second failure"],
        "{}",
        app.dump(&sid).await
    );
}

#[tokio::test]
async fn typing_and_tool_call_show_an_indicator_cleared_by_message_completed_silent_errored() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    let t = new_id();

    // typing → indicator for scope user_message_id.
    assert_accepted(&app.post(&typing(&sid, &t, Some("um-1"))).await);
    let ty = app.typing(&sid).await;
    assert_eq!(ty.len(), 1, "typing: {ty:?}");
    assert_eq!(ty[0]["scope"], "um-1", "{ty:?}");
    assert_eq!(ty[0]["session_id"], sid.as_str(), "{ty:?}");
    assert!(is_time_micros(&ty[0]["since"]), "typing.since: {ty:?}");
    assert_eq!(ty[0]["label"], Value::Null, "no label yet: {ty:?}");
    let started = ev
        .until("typing_started", WAIT, |e| e.kind() == "typing_started")
        .await;
    assert_eq!(
        started.last().unwrap().typing()["scope"],
        "um-1",
        "{}",
        dump_events(&started)
    );
    // Live-only: no cursor, never in the log (the route above is its state).
    let shown = started.last().unwrap();
    assert!(
        shown.id.is_none() && shown.json()["live"] == true && shown.json().get("id").is_none(),
        "{}",
        shown.short()
    );

    // A keepalive with a label: still one indicator, now labelled.
    assert_accepted(
        &app.post(&with(
            typing(&sid, &t, Some("um-1")),
            json!({"label": "thinking"}),
        ))
        .await,
    );
    let ty = app.typing(&sid).await;
    assert_eq!(ty.len(), 1, "one indicator per scope: {ty:?}");
    assert_eq!(ty[0]["label"], "thinking", "{ty:?}");

    // message of the scope clears it (reason message).
    assert_applied(
        &app.post(&with(
            message(&sid, &t, "m-1", "Answer one"),
            json!({"user_message_id": "um-1"}),
        ))
        .await,
    );
    assert_eq!(app.typing(&sid).await, Vec::<Value>::new());
    let evs = ev
        .until("typing_stopped", WAIT, |e| e.kind() == "typing_stopped")
        .await;
    assert_eq!(
        evs.last().unwrap().reason().as_deref(),
        Some("message"),
        "{}",
        dump_events(&evs)
    );

    // completed clears (reason completed).
    let t2 = new_id();
    assert_accepted(&app.post(&typing(&sid, &t2, Some("um-2"))).await);
    assert_eq!(app.typing(&sid).await.len(), 1);
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &t2, "completed"),
            json!({"user_message_id": "um-2"}),
        ))
        .await,
    );
    assert_eq!(app.typing(&sid).await, Vec::<Value>::new());
    let evs = ev
        .until("typing_stopped", WAIT, |e| e.kind() == "typing_stopped")
        .await;
    assert_eq!(
        evs.last().unwrap().reason().as_deref(),
        Some("completed"),
        "{}",
        dump_events(&evs)
    );

    // silent clears.
    let t3 = new_id();
    assert_accepted(&app.post(&typing(&sid, &t3, Some("um-3"))).await);
    assert_eq!(app.typing(&sid).await.len(), 1);
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &t3, "silent"),
            json!({"user_message_id": "um-3"}),
        ))
        .await,
    );
    assert_eq!(app.typing(&sid).await, Vec::<Value>::new());

    // errored clears (reason errored).
    let t4 = new_id();
    assert_accepted(&app.post(&typing(&sid, &t4, Some("um-4"))).await);
    assert_applied(
        &app.post(&with(
            status_body(&sid, &t4, "errored"),
            json!({"user_message_id": "um-4", "error_code": "x", "error_message": "boom"}),
        ))
        .await,
    );
    assert_eq!(app.typing(&sid).await, Vec::<Value>::new());
    let evs = ev
        .until("typing_stopped (errored)", WAIT, |e| {
            e.kind() == "typing_stopped" && e.typing()["scope"] == "um-4"
        })
        .await;
    assert_eq!(
        evs.last().unwrap().reason().as_deref(),
        Some("errored"),
        "{}",
        dump_events(&evs)
    );

    // notice of the scope clears too.
    let t5 = new_id();
    assert_accepted(&app.post(&typing(&sid, &t5, Some("um-5"))).await);
    assert_applied(
        &app.post(&with(
            status_body(&sid, &t5, "notice"),
            json!({"user_message_id": "um-5", "message_id": "n-5", "reply_text": "interim"}),
        ))
        .await,
    );
    assert_eq!(
        app.typing(&sid).await,
        Vec::<Value>::new(),
        "notice clears typing"
    );

    // Without user_message_id the scope is the task.
    let t6 = new_id();
    assert_accepted(&app.post(&typing(&sid, &t6, None)).await);
    let ty = app.typing(&sid).await;
    assert_eq!(ty.len(), 1, "{ty:?}");
    assert_eq!(ty[0]["scope"], t6.as_str(), "{ty:?}");
    assert_applied(
        &app.post(&message(&sid, &t6, "m-6", "task-scoped reply"))
            .await,
    );
    assert_eq!(app.typing(&sid).await, Vec::<Value>::new());

    // tool_call: like typing, label from `label` or else `reply_text`.
    let t7 = new_id();
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &t7, "tool_call"),
            json!({"user_message_id": "um-7", "label": "web_search"}),
        ))
        .await,
    );
    let t8 = new_id();
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &t8, "tool_call"),
            json!({"user_message_id": "um-8", "reply_text": "Reading calendar"}),
        ))
        .await,
    );
    let mut ty = app.typing(&sid).await;
    ty.sort_by_key(|t| t["scope"].as_str().unwrap_or("").to_owned());
    assert_eq!(ty.len(), 2, "{ty:?}");
    assert_eq!(
        (ty[0]["scope"].clone(), ty[0]["label"].clone()),
        (json!("um-7"), json!("web_search"))
    );
    assert_eq!(
        (ty[1]["scope"].clone(), ty[1]["label"].clone()),
        (json!("um-8"), json!("Reading calendar"))
    );
    // tool_call text is a label, not a message.
    assert!(
        !texts(&app.messages(&sid).await).contains(&"Reading calendar".to_owned()),
        "{}",
        app.dump(&sid).await
    );
    // The log replayed from the start has the messages and none of the typing events.
    let mut replay = app.events(SseOpts::after(0)).await;
    let logged = replay.until_message("m-6").await;
    assert!(
        logged
            .iter()
            .all(|e| e.id.is_some() && !e.kind().starts_with("typing_")),
        "{}",
        dump_events(&logged)
    );

    // Scopes are independent: a message of um-7 leaves um-8 alone.
    assert_applied(
        &app.post(&with(
            message(&sid, &t7, "m-7", "search done"),
            json!({"user_message_id": "um-7"}),
        ))
        .await,
    );
    let ty = app.typing(&sid).await;
    assert_eq!(ty.len(), 1, "{ty:?}");
    assert_eq!(ty[0]["scope"], "um-8", "{ty:?}");
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &t8, "completed"),
            json!({"user_message_id": "um-8"}),
        ))
        .await,
    );
    assert_eq!(app.typing(&sid).await, Vec::<Value>::new());
}

#[tokio::test]
async fn typing_and_open_drafts_time_out() {
    let app = App::start_with(&["--typing-timeout-secs", "1"]).await;
    let sid = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    let t0 = Instant::now();

    // A: plain typing that is never answered.
    assert_accepted(&app.post(&typing(&sid, &new_id(), Some("um-a"))).await);
    // B: typing, completed, then typing again after completed: shown again.
    let tb = new_id();
    assert_accepted(&app.post(&typing(&sid, &tb, Some("um-b"))).await);
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &tb, "completed"),
            json!({"user_message_id": "um-b"}),
        ))
        .await,
    );
    assert_accepted(&app.post(&typing(&sid, &tb, Some("um-b"))).await);
    // C: a stream draft left open.
    let tc = new_id();
    assert_accepted(&app.post(&typing(&sid, &tc, Some("um-c"))).await);
    for chunk in [
        json!({"type": "start", "messageId": tc}),
        json!({"type": "text-start", "id": "p1"}),
        json!({"type": "text-delta", "id": "p1", "delta": "Partial "}),
        json!({"type": "text-delta", "id": "p1", "delta": "answer"}),
    ] {
        assert_accepted(&app.post(&stream(&sid, &tc, Some("um-c"), chunk)).await);
    }
    let posted = t0.elapsed();

    let mut scopes: Vec<String> = app
        .typing(&sid)
        .await
        .iter()
        .map(|t| t["scope"].as_str().unwrap_or("").to_owned())
        .collect();
    scopes.sort();
    let draft_id = {
        let msgs = app.messages(&sid).await;
        let d = drafts(&msgs);
        assert_eq!(d.len(), 1, "one open draft:\n{}", dump_entries(&msgs));
        assert_eq!(
            text_of(d[0]).trim_end(),
            "Partial answer",
            "{}",
            dump_entries(&msgs)
        );
        d[0]["id"].clone()
    };
    if posted < Duration::from_millis(800) {
        assert_eq!(
            scopes,
            vec!["um-a", "um-b", "um-c"],
            "typing shown before the timeout"
        );
    }

    // All indicators go away by themselves.
    wait_for("typing to time out", Duration::from_secs(8), || async {
        let ty = app.typing(&sid).await;
        if ty.is_empty() {
            Ok(())
        } else {
            Err(format!("{ty:?}"))
        }
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "typing cleared after {:?}, before the 1 s timeout",
        t0.elapsed()
    );

    // The open draft is settled as it is.
    let settled = wait_for(
        "the open draft to settle",
        Duration::from_secs(8),
        || async {
            let msgs = app.messages(&sid).await;
            if drafts(&msgs).is_empty() && msgs.len() == 1 {
                Ok(msgs)
            } else {
                Err(dump_entries(&msgs))
            }
        },
    )
    .await;
    assert_eq!(
        settled[0]["id"],
        draft_id,
        "settled in place:\n{}",
        dump_entries(&settled)
    );
    assert_eq!(text_of(&settled[0]).trim_end(), "Partial answer");

    // typing_stopped with reason timeout for each scope.
    let mut stopped = std::collections::BTreeMap::new();
    let evs = ev
        .until("three typing_stopped (timeout)", WAIT, |e| {
            if e.kind() == "typing_stopped" && e.reason().as_deref() == Some("timeout") {
                stopped.insert(e.typing()["scope"].as_str().unwrap_or("").to_owned(), ());
            }
            stopped.len() == 3
        })
        .await;
    let keys: Vec<&String> = stopped.keys().collect();
    assert_eq!(keys, vec!["um-a", "um-b", "um-c"], "{}", dump_events(&evs));
}

#[tokio::test]
async fn typing_keepalives_reset_the_timer_and_cursor_drafts_settle_on_timeout() {
    let app = App::start_with(&["--typing-timeout-secs", "1"]).await;
    let sid = app.create_chat().await;
    let t = new_id();
    // Keepalives every 300 ms for 2 s keep the 1 s indicator alive.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2_000) {
        assert_accepted(&app.post(&typing(&sid, &t, Some("um-k"))).await);
        let ty = app.typing(&sid).await;
        assert_eq!(
            ty.len(),
            1,
            "typing lost after {:?} despite keepalives: {ty:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // An edit-style (cursor) draft of the same scope, then silence.
    assert_applied(
        &app.post(&with(
            message(&sid, &new_id(), "cur-1", "\n\nHalf an answer ▉"),
            json!({"user_message_id": "um-k"}),
        ))
        .await,
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(drafts(&msgs).len(), 1, "{}", dump_entries(&msgs));
    let id = msgs[0]["id"].clone();
    assert_accepted(&app.post(&typing(&sid, &t, Some("um-k"))).await);
    let settled = wait_for(
        "the cursor draft to settle",
        Duration::from_secs(8),
        || async {
            let msgs = app.messages(&sid).await;
            let ty = app.typing(&sid).await;
            if drafts(&msgs).is_empty() && ty.is_empty() {
                Ok(msgs)
            } else {
                Err(format!("{}typing: {ty:?}", dump_entries(&msgs)))
            }
        },
    )
    .await;
    assert_eq!(settled.len(), 1, "{}", dump_entries(&settled));
    assert_eq!(settled[0]["id"], id, "settled in place");
    assert_eq!(text_of(&settled[0]).trim_end(), "Half an answer");
}

#[tokio::test]
async fn a_reply_after_completed_with_a_new_task_id_is_shown() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let t1 = new_id();
    assert_accepted(&app.post(&typing(&sid, &t1, Some("um-x"))).await);
    assert_applied(
        &app.post(&with(
            message(&sid, &t1, "m-tool", "📚 skills_list..."),
            json!({"user_message_id": "um-x"}),
        ))
        .await,
    );
    assert_accepted(
        &app.post(&with(
            status_body(&sid, &t1, "completed"),
            json!({"user_message_id": "um-x"}),
        ))
        .await,
    );
    assert!(app.typing(&sid).await.is_empty());
    // Typing after completed shows again.
    assert_accepted(&app.post(&typing(&sid, &t1, Some("um-x"))).await);
    assert_eq!(
        app.typing(&sid).await.len(),
        1,
        "typing after completed is shown"
    );
    // The real reply, with a new random task_id.
    let t2 = new_id();
    assert_applied(
        &app.post(&with(
            message(&sid, &t2, "m-final", "Stub reply #23: tool result received"),
            json!({"user_message_id": "um-x"}),
        ))
        .await,
    );
    assert!(
        app.typing(&sid).await.is_empty(),
        "{}",
        app.dump(&sid).await
    );
    // And one for a task nobody ever announced.
    assert_applied(
        &app.post(&message(&sid, &new_id(), "m-other", "Unannounced"))
            .await,
    );
    assert_eq!(
        texts(&app.messages(&sid).await),
        vec![
            "📚 skills_list...",
            "Stub reply #23: tool result received",
            "Unannounced"
        ],
        "{}",
        app.dump(&sid).await
    );
}

// ---------------------------------------------------------------------------------------------
// Streaming drafts
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stream_drafts_settle_in_place_and_late_chunks_are_ignored() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    let t = new_id();
    let um = Some("um-s");
    assert_accepted(&app.post(&typing(&sid, &t, um)).await);
    for chunk in [
        json!({"type": "start", "messageId": t}),
        json!({"type": "text-start", "id": "p1"}),
        json!({"type": "text-delta", "id": "p1", "delta": "Hel"}),
        json!({"type": "text-delta", "id": "p1", "delta": "lo wor"}),
    ] {
        assert_accepted(&app.post(&stream(&sid, &t, um, chunk)).await);
    }
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "one draft:\n{}", dump_entries(&msgs));
    assert_eq!(msgs[0]["draft"], true, "{}", dump_entries(&msgs));
    assert_eq!(text_of(&msgs[0]), "Hello wor", "{}", dump_entries(&msgs));
    let id = msgs[0]["id"].clone();

    // The final message settles it in place.
    assert_applied(
        &app.post(&with(
            message(&sid, &t, "m-final", "Hello world"),
            json!({"user_message_id": "um-s"}),
        ))
        .await,
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "{}", dump_entries(&msgs));
    assert_eq!(msgs[0]["id"], id, "same id:\n{}", dump_entries(&msgs));
    assert_eq!(msgs[0]["draft"], false, "{}", dump_entries(&msgs));
    assert_eq!(text_of(&msgs[0]), "Hello world");
    assert_eq!(msgs[0]["message_id"], "m-final", "{}", dump_entries(&msgs));
    assert!(app.typing(&sid).await.is_empty());
    // A retry of the final message (slow answer) is a duplicate.
    assert_duplicate(
        &app.post(&with(
            message(&sid, &t, "m-final", "Hello world"),
            json!({"user_message_id": "um-s"}),
        ))
        .await,
    );

    // Late chunks of the settled part and repeated start/end/finish change nothing.
    for chunk in [
        json!({"type": "text-delta", "id": "p1", "delta": "ld"}),
        json!({"type": "text-end", "id": "p1"}),
        json!({"type": "finish", "finishReason": "stop"}),
        json!({"type": "finish", "finishReason": "stop"}),
        json!({"type": "start", "messageId": t}),
    ] {
        assert_accepted(&app.post(&stream(&sid, &t, um, chunk)).await);
    }
    // A repeated final text under another message_id is a duplicate.
    assert_duplicate(
        &app.post(&with(
            message(&sid, &new_id(), "m-final-again", "Hello world"),
            json!({"user_message_id": "um-s"}),
        ))
        .await,
    );
    let after = app.messages(&sid).await;
    assert_eq!(after, msgs, "late chunks changed the conversation");

    // Events: added as a draft, updated, settled; nothing after settlement.
    let sentinel = new_id();
    assert_applied(
        &app.post(&message(&sid, &new_id(), &sentinel, "sentinel"))
            .await,
    );
    let evs = ev.until_message(&sentinel).await;
    let mine: Vec<&SseEvent> = evs
        .iter()
        .filter(|e| e.kind().starts_with("message_") && e.message()["id"] == id)
        .collect();
    let dumped = dump_events(&evs);
    assert!(mine.len() >= 2, "{dumped}");
    assert_eq!(mine[0].kind(), "message_added", "{dumped}");
    assert_eq!(mine[0].message()["draft"], true, "{dumped}");
    for e in &mine[1..] {
        assert_eq!(e.kind(), "message_updated", "{dumped}");
    }
    let last = mine.last().unwrap().message();
    assert_eq!(last["draft"], false, "{dumped}");
    assert_eq!(last["text"], "Hello world", "{dumped}");
    let settled_at = mine
        .iter()
        .position(|e| e.message()["draft"] == false)
        .unwrap();
    assert_eq!(
        settled_at,
        mine.len() - 1,
        "events after settlement:\n{dumped}"
    );
    // Cursors strictly increase; the typing indicator's events are live-only (no cursor).
    let (logged, live): (Vec<&SseEvent>, Vec<&SseEvent>) = evs.iter().partition(|e| e.id.is_some());
    let cursors: Vec<u64> = logged.iter().map(|e| e.cursor()).collect();
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "{dumped}");
    assert!(
        live.iter()
            .all(|e| e.kind().starts_with("typing_") && e.json()["live"] == true),
        "{dumped}"
    );
}

#[tokio::test]
async fn a_new_stream_part_replaces_the_previous_part_text() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let t = new_id();
    for chunk in [
        json!({"type": "start", "messageId": t}),
        json!({"type": "text-start", "id": "a"}),
        json!({"type": "text-delta", "id": "a", "delta": "Let me check"}),
        json!({"type": "text-end", "id": "a"}),
        json!({"type": "text-start", "id": "b"}),
        json!({"type": "text-delta", "id": "b", "delta": "The answer"}),
        json!({"type": "text-delta", "id": "b", "delta": " is 42"}),
    ] {
        assert_accepted(&app.post(&stream(&sid, &t, None, chunk)).await);
    }
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "{}", dump_entries(&msgs));
    assert_eq!(
        text_of(&msgs[0]),
        "The answer is 42",
        "{}",
        dump_entries(&msgs)
    );
    assert_eq!(msgs[0]["draft"], true);
    let id = msgs[0]["id"].clone();
    assert_applied(
        &app.post(&message(&sid, &t, "m-42", "The answer is 42."))
            .await,
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "{}", dump_entries(&msgs));
    assert_eq!(msgs[0]["id"], id);
    assert_eq!(msgs[0]["draft"], false);
    assert_eq!(text_of(&msgs[0]), "The answer is 42.");
}

#[tokio::test]
async fn edit_style_cursor_drafts_settle_into_one_message() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let um = json!({"user_message_id": "um-e"});
    let post = |mid: &'static str, text: &'static str| {
        let body = with(message(&sid, &new_id(), mid, text), um.clone());
        let app = &app;
        async move { app.post(&body).await }
    };

    assert_applied(&post("x1", "\n\nDraft  ▉").await);
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "{}", dump_entries(&msgs));
    assert_eq!(
        msgs[0]["draft"],
        true,
        "a cursor text is a draft: {}",
        dump_entries(&msgs)
    );
    assert_eq!(
        text_of(&msgs[0]).trim_end(),
        "Draft",
        "cursor removed: {}",
        dump_entries(&msgs)
    );
    assert!(!text_of(&msgs[0]).contains('▉'));
    let id = msgs[0]["id"].clone();

    assert_applied(&post("x2", "\n\nDraft answer ▉").await);
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "extends in place: {}", dump_entries(&msgs));
    assert_eq!(msgs[0]["id"], id);
    assert_eq!(text_of(&msgs[0]).trim_end(), "Draft answer");
    assert_eq!(msgs[0]["draft"], true);

    assert_applied(&post("x3", "\n\nDraft answer done").await);
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "settles in place: {}", dump_entries(&msgs));
    assert_eq!(msgs[0]["id"], id);
    assert_eq!(msgs[0]["draft"], false);
    assert_eq!(text_of(&msgs[0]), "Draft answer done");

    assert_duplicate(&post("x4", "\n\nDraft answer done").await);
    assert_eq!(app.messages(&sid).await, msgs);
}

#[tokio::test]
async fn a_draft_that_is_a_prefix_of_a_shown_message_is_not_shown() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    assert_applied(
        &app.post(&with(
            message(&sid, &new_id(), "m-full", "Complete answer text"),
            json!({"user_message_id": "um-p"}),
        ))
        .await,
    );
    let t = new_id();
    for chunk in [
        json!({"type": "start", "messageId": t}),
        json!({"type": "text-start", "id": "q"}),
        json!({"type": "text-delta", "id": "q", "delta": "Complete ans"}),
    ] {
        assert_accepted(&app.post(&stream(&sid, &t, Some("um-p"), chunk)).await);
    }
    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec!["Complete answer text"],
        "{}",
        dump_entries(&msgs)
    );
    // A cursor draft that is a prefix of it is not shown either.
    assert_accepted(
        &app.post(&with(
            message(&sid, &new_id(), "m-cur", "Complete ▉"),
            json!({"user_message_id": "um-p"}),
        ))
        .await,
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec!["Complete answer text"],
        "{}",
        dump_entries(&msgs)
    );
}

// ---------------------------------------------------------------------------------------------
// Text clean-up, duplicates, ordering
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn text_cleanup_and_near_identical_resends() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let scoped = |mid: &str, text: &str, um: &str| {
        with(
            message(&sid, &new_id(), mid, text),
            json!({"user_message_id": um}),
        )
    };
    assert_applied(
        &app.post(&scoped("a1", "\n\n\nLeading blank lines", "um-1"))
            .await,
    );
    assert_applied(
        &app.post(&scoped(
            "a2",
            "(Response formatting failed, plain text:)\n\nPlain fallback",
            "um-2",
        ))
        .await,
    );
    assert_applied(
        &app.post(&scoped("a3", "Keep\n\nthe middle ▉ intact", "um-3"))
            .await,
    );
    // Near-identical re-sends in the same scope are duplicates…
    assert_duplicate(&app.post(&scoped("a4", "Leading blank lines", "um-1")).await);
    assert_duplicate(
        &app.post(&scoped(
            "a5",
            "(Response formatting failed, plain text:)\n\nLeading blank lines",
            "um-1",
        ))
        .await,
    );
    assert_duplicate(&app.post(&scoped("a6", "\n\nPlain fallback", "um-2")).await);
    // …but not across scopes.
    assert_applied(&app.post(&scoped("a7", "Leading blank lines", "um-9")).await);

    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec![
            "Leading blank lines",
            "Plain fallback",
            "Keep\n\nthe middle ▉ intact",
            "Leading blank lines"
        ],
        "{}",
        app.dump(&sid).await
    );
    assert!(drafts(&msgs).is_empty(), "{}", dump_entries(&msgs));
}

#[tokio::test]
async fn duplicates_answer_duplicate_and_change_nothing() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let other = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;

    let m1 = message(&sid, &new_id(), "dup-1", "Only once");
    assert_applied(&app.post(&m1).await);
    let before = app.messages(&sid).await;
    assert_duplicate(&app.post(&m1).await);
    // Same message_id, different text: still a duplicate; the text is not replaced.
    assert_duplicate(
        &app.post(&with(m1.clone(), json!({"reply_text": "Changed text"})))
            .await,
    );
    assert_eq!(
        app.messages(&sid).await,
        before,
        "a duplicate changed the conversation"
    );

    // The same message_id in another session is a different message.
    assert_applied(
        &app.post(&message(&other, &new_id(), "dup-1", "Only once"))
            .await,
    );
    assert_eq!(texts(&app.messages(&other).await), vec!["Only once"]);

    // Without message_id: identity is (task_id, reply_text).
    let t = new_id();
    let no_id =
        json!({"task_id": t, "session_id": sid, "status": "message", "reply_text": "hash me"});
    assert_applied(&app.post(&no_id).await);
    assert_duplicate(&app.post(&no_id).await);
    let t2 = new_id();
    assert_applied(&app.post(&with(no_id.clone(), json!({"task_id": t2}))).await);

    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec!["Only once", "hash me", "hash me"],
        "{}",
        app.dump(&sid).await
    );

    // Exactly one message_added per applied post, no event for a duplicate.
    let sentinel = new_id();
    assert_applied(
        &app.post(&message(&sid, &new_id(), &sentinel, "sentinel"))
            .await,
    );
    let evs = ev.until_message(&sentinel).await;
    let added = evs.iter().filter(|e| e.kind() == "message_added").count();
    let updated = evs.iter().filter(|e| e.kind() == "message_updated").count();
    assert_eq!((added, updated), (5, 0), "events:\n{}", dump_events(&evs));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_copies_of_one_message_store_exactly_one() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    let body = with(
        message(&sid, &new_id(), "race-1", "Stored exactly once"),
        json!({"user_message_id": "um-race", "occurred_at": rfc3339(now_micros())}),
    );
    let cb = app.cb();
    let handles: Vec<_> = (0..50)
        .map(|_| {
            let cb = cb.clone();
            let body = body.clone();
            tokio::spawn(async move { cb.post(&body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for h in handles {
        answers.push(h.await.expect("sender task"));
    }
    for r in &answers {
        assert_eq!(r.status, 200, "{r}");
        assert_eq!(r.json["ok"], true, "{r}");
    }
    let applied = answers.iter().filter(|r| !r.is_duplicate()).count();
    assert_eq!(
        applied,
        1,
        "exactly one copy applied, the rest duplicate: {:?}",
        answers.iter().map(|r| r.text.clone()).collect::<Vec<_>>()
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec!["Stored exactly once"],
        "{}",
        dump_entries(&msgs)
    );
    let sentinel = new_id();
    assert_applied(
        &app.post(&message(&sid, &new_id(), &sentinel, "sentinel"))
            .await,
    );
    let evs = ev.until_message(&sentinel).await;
    let added: Vec<&SseEvent> = evs
        .iter()
        .filter(|e| e.kind() == "message_added" && e.message()["message_id"] == "race-1")
        .collect();
    assert_eq!(added.len(), 1, "{}", dump_events(&evs));
}

#[tokio::test]
async fn order_follows_occurred_at_and_a_late_arrival_is_inserted_in_place() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    // A whole second two minutes ago, so the no-fraction form is exact.
    let base = (now_micros() / 1_000_000 - 120) * 1_000_000;
    let at = |off_ms: i64| base + off_ms * 1000;
    let post = |mid: &str, text: &str, occurred: String| {
        let body = with(
            message(&sid, &new_id(), mid, text),
            json!({"occurred_at": occurred}),
        );
        let app = &app;
        async move { app.post(&body).await }
    };
    assert_applied(&post("A", "first", rfc3339(at(1_000) + 123)).await);
    assert_applied(&post("C", "third", rfc3339(at(3_000))).await);
    assert_applied(&post("B", "second (late)", rfc3339(at(2_000) + 456_789)).await);
    // Another offset, same instant system: 2.5 s written as +02:00.
    assert_applied(&post("G", "second and a half", rfc3339_offset(at(2_500), 2)).await);
    // Without a fraction.
    assert_applied(&post("D", "fourth", rfc3339_secs(at(4_000))).await);

    let msgs = app.messages(&sid).await;
    let dump = dump_entries(&msgs);
    assert_eq!(
        texts(&msgs),
        vec![
            "first",
            "second (late)",
            "second and a half",
            "third",
            "fourth"
        ],
        "{dump}"
    );
    let keys: Vec<i64> = msgs
        .iter()
        .map(|m| m["sort_key"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(
        keys,
        vec![
            at(1_000) + 123,
            at(2_000) + 456_789,
            at(2_500),
            at(3_000),
            at(4_000)
        ],
        "sort_key = occurred_at in µs:\n{dump}"
    );

    // The late message's event carries its sort_key.
    let evs = ev.until_message("B").await;
    let e = evs.last().unwrap();
    assert_eq!(e.kind(), "message_added", "{}", dump_events(&evs));
    assert_eq!(
        e.message()["sort_key"],
        json!(at(2_000) + 456_789),
        "{}",
        e.short()
    );

    // A time in the future is clamped to arrival; a non-RFC-3339 time is ignored.
    let before = now_micros();
    assert_applied(
        &post(
            "F",
            "from the future",
            rfc3339(now_micros() + 86_400_000_000),
        )
        .await,
    );
    assert_applied(&post("Y", "bad timestamp", "yesterday at noon".to_owned()).await);
    assert_applied(
        &app.post(&message(&sid, &new_id(), "N", "no timestamp"))
            .await,
    );
    let after = now_micros();
    let msgs = app.messages(&sid).await;
    let dump = dump_entries(&msgs);
    assert_eq!(
        texts(&msgs)[5..],
        ["from the future", "bad timestamp", "no timestamp"],
        "{dump}"
    );
    for m in &msgs[5..] {
        let k = m["sort_key"].as_i64().unwrap_or(-1);
        assert!(
            k >= before - 2_000_000 && k <= after + 2_000_000,
            "sort_key {k} not ≈ arrival [{before}, {after}]:\n{dump}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sessions: ended, deleted, insights
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn unknown_and_deleted_sessions_are_session_ended() {
    let app = App::start().await;
    assert_session_ended(&app.post(&message("sw-unknown", &new_id(), "m", "hi")).await);
    assert_session_ended(&app.post(&typing("sw-unknown", &new_id(), Some("um"))).await);
    assert_session_ended(
        &app.post(&message("insights:sw-unknown", &new_id(), "m", "insight"))
            .await,
    );

    let sid = app.create_chat().await;
    assert_applied(
        &app.post(&message(&sid, &new_id(), "m-1", "before delete"))
            .await,
    );
    let r = app.delete_session(&sid).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json, json!({"ok": true}), "{r}");
    assert_session_ended(
        &app.post(&message(&sid, &new_id(), "m-2", "after delete"))
            .await,
    );
    // Even a re-send of a message it had.
    assert_session_ended(
        &app.post(&message(&sid, &new_id(), "m-1", "before delete"))
            .await,
    );
    let r = app.ui().get(&format!("/api/sessions/{sid}/messages")).await;
    assert!(
        r.status == 404 || r.json == json!([]),
        "messages of a deleted session must be gone: {r}"
    );
    let r = app.ui().get("/api/sessions").await;
    assert!(!r.text.contains(&sid), "deleted session still listed: {r}");

    // Deleting a call also ends its insights session.
    let (call, isid) = app.create_call().await;
    assert_applied(
        &app.post(&message(&isid, &new_id(), "i-1", "an insight"))
            .await,
    );
    assert_eq!(app.delete_session(&call).await.status, 200);
    assert_session_ended(&app.post(&message(&isid, &new_id(), "i-2", "another")).await);
}

#[tokio::test]
async fn insights_session_past_its_grace_is_session_ended() {
    let app = App::start_with(&["--insights-grace-secs", "1"]).await;
    let (sid, isid) = app.create_call().await;
    assert_applied(
        &app.post(&message(&isid, &new_id(), "i-a", "Insight A"))
            .await,
    );

    let r = app.end_call(&sid).await;
    let ended = Instant::now();
    assert_eq!(r.status, 200, "{r}");
    let session = r.json.get("session").cloned().unwrap_or(r.json.clone());
    assert_eq!(session["session_id"], sid.as_str(), "{r}");
    assert_eq!(session["is_call"], true, "{r}");
    assert!(session["ended_at"].is_string(), "ended_at set: {r}");

    // Within the grace period replies are still accepted.
    let r = app
        .post(&message(&isid, &new_id(), "i-b", "Insight B"))
        .await;
    let within_grace = ended.elapsed() < Duration::from_millis(900);
    if within_grace {
        assert_applied(&r);
    }
    // The chat of an ended call is not closed.
    assert_applied(
        &app.post(&message(&sid, &new_id(), "c-1", "chat after the call"))
            .await,
    );

    // Past it: session_ended. (A deadline, not a poll: every accepted post would add an insight.)
    tokio::time::sleep_until((ended + Duration::from_millis(1_600)).into()).await;
    assert_session_ended(
        &app.post(&message(&isid, &new_id(), "i-c", "Insight C"))
            .await,
    );
    assert_applied(
        &app.post(&message(&sid, &new_id(), "c-2", "chat still open"))
            .await,
    );

    let ins = app.insights(&sid).await;
    let expected = if within_grace || !r.is_ignored() {
        vec!["Insight B", "Insight A"]
    } else {
        vec!["Insight A"]
    };
    assert_eq!(
        texts(&ins),
        expected,
        "newest first:\n{}",
        dump_entries(&ins)
    );
    assert_eq!(
        texts(&app.messages(&sid).await),
        vec!["chat after the call", "chat still open"]
    );

    // end: errors.
    let chat = app.create_chat().await;
    let r = app.end_call(&chat).await;
    assert_error(&r, 409, "not_a_call");
    let r = app.end_call("sw-no-such-session").await;
    assert_error(&r, 404, "session_not_found");
}

#[tokio::test]
async fn insights_go_to_the_insights_list_and_none_is_hidden() {
    let app = App::start().await;
    let (sid, isid) = app.create_call().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    for (i, text) in ["none", "None.", "NONE", "nOnE."].iter().enumerate() {
        let r = app
            .post(&message(&isid, &new_id(), &format!("hidden-{i}"), text))
            .await;
        assert_applied(&r);
    }
    assert_applied(
        &app.post(&message(&isid, &new_id(), "real-1", "Budget is 50k for Q3"))
            .await,
    );
    assert_applied(
        &app.post(&message(
            &isid,
            &new_id(),
            "real-2",
            "None of them agreed on the date",
        ))
        .await,
    );

    let ins = app.insights(&sid).await;
    let dump = app.dump(&sid).await;
    assert_eq!(
        texts(&ins),
        vec!["None of them agreed on the date", "Budget is 50k for Q3"],
        "{dump}"
    );
    for i in &ins {
        for key in [
            "id",
            "session_id",
            "text",
            "task_id",
            "message_id",
            "occurred_at",
            "received_at",
            "offset_ms",
            "draft",
        ] {
            assert!(i.get(key).is_some(), "insight lacks `{key}`: {i}");
        }
        assert!(is_time_micros(&i["received_at"]), "{i}");
        assert_eq!(
            i["session_id"],
            sid.as_str(),
            "insight.session_id is the chat: {i}"
        );
        assert_eq!(i["draft"], false, "{i}");
        let off = i["offset_ms"].as_i64().unwrap_or(-1);
        assert!((0..600_000).contains(&off), "offset_ms into the call: {i}");
    }
    assert_eq!(
        app.messages(&sid).await,
        Vec::<Value>::new(),
        "never in the chat:\n{dump}"
    );

    let evs = ev
        .until("insight_added real-2", WAIT, |e| {
            e.kind() == "insight_added" && e.insight()["message_id"] == "real-2"
        })
        .await;
    let shown: Vec<String> = evs
        .iter()
        .filter(|e| e.kind().starts_with("insight_"))
        .map(|e| text_of(&e.insight()))
        .collect();
    assert_eq!(
        shown,
        vec!["Budget is 50k for Q3", "None of them agreed on the date"],
        "hidden replies must not be announced:\n{}",
        dump_events(&evs)
    );
    assert!(
        !evs.iter().any(|e| e.kind().starts_with("message_")),
        "insights announced as chat messages:\n{}",
        dump_events(&evs)
    );

    // A streamed insight is not surfaced before its final message (it may end as `none`).
    let t = new_id();
    for chunk in [
        json!({"type": "start", "messageId": t}),
        json!({"type": "text-start", "id": "n"}),
        json!({"type": "text-delta", "id": "n", "delta": "No"}),
        json!({"type": "text-delta", "id": "n", "delta": "ne"}),
    ] {
        assert_accepted(&app.post(&stream(&isid, &t, None, chunk)).await);
    }
    assert_eq!(
        app.insights(&sid).await.len(),
        2,
        "{}",
        app.dump(&sid).await
    );
    assert_applied(&app.post(&message(&isid, &t, "streamed-none", "None")).await);
    for chunk in [
        json!({"type": "text-end", "id": "n"}),
        json!({"type": "finish", "finishReason": "stop"}),
    ] {
        assert_accepted(&app.post(&stream(&isid, &t, None, chunk)).await);
    }
    let sentinel = new_id();
    assert_applied(
        &app.post(&message(&isid, &new_id(), &sentinel, "After the stream"))
            .await,
    );
    let evs = ev
        .until("insight_added of the sentinel", WAIT, |e| {
            e.kind() == "insight_added" && e.insight()["message_id"] == sentinel.as_str()
        })
        .await;
    assert!(
        evs.iter()
            .all(|e| !e.kind().starts_with("insight_")
                || e.insight()["message_id"] == sentinel.as_str()),
        "a streamed `none` was announced:\n{}",
        dump_events(&evs)
    );
    assert!(
        !evs.iter().any(|e| e.kind().starts_with("message_")),
        "an insights stream was announced as a chat message:\n{}",
        dump_events(&evs)
    );
    assert_eq!(
        texts(&app.insights(&sid).await),
        vec![
            "After the stream",
            "None of them agreed on the date",
            "Budget is 50k for Q3"
        ]
    );
    assert_eq!(app.messages(&sid).await, Vec::<Value>::new());

    // Dedupe applies to insights too.
    assert_duplicate(
        &app.post(&message(&isid, &new_id(), "real-1", "Budget is 50k for Q3"))
            .await,
    );
    // `none` in a chat is just a message.
    assert_applied(
        &app.post(&message(&sid, &new_id(), "chat-none", "none"))
            .await,
    );
    assert_eq!(texts(&app.messages(&sid).await), vec!["none"]);
}

// ---------------------------------------------------------------------------------------------
// Request checks, in the contract's order
// ---------------------------------------------------------------------------------------------

fn raw_post(path: &str, host: &str, token: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn foreign_host_headers_get_403_bad_host() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let addr = app.ready.callback_addr.clone();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let other_port = (port.parse::<u32>().unwrap() % 60_000 + 1).to_string();
    let token = app.ready.callback_token.clone();

    let ok_body = |mid: &str| message(&sid, &new_id(), mid, &format!("via {mid}")).to_string();
    for (i, host) in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("127.0.0.1:{other_port}"),
        format!("127.0.0.2:{port}"),
        format!("localhost.evil.example:{port}"),
        "127.0.0.1".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let body = ok_body(&format!("bad-{i}"));
        let task = serde_json::from_str::<Value>(&body).unwrap()["task_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = raw_request(
            &addr,
            raw_post(&format!("/tasks/{task}"), host, &token, &body),
            WAIT,
        )
        .await;
        assert_error(
            &r.to_resp(&format!("POST with Host: {host}")),
            403,
            "bad_host",
        );
    }
    // 403 comes before 404 and 401.
    let r = raw_request(
        &addr,
        raw_post("/nope", "evil.example", "wrong", "{}"),
        WAIT,
    )
    .await;
    assert_error(
        &r.to_resp("POST /nope with Host: evil.example"),
        403,
        "bad_host",
    );

    // Both loopback spellings of this listener are fine.
    for (i, host) in [format!("127.0.0.1:{port}"), format!("localhost:{port}")]
        .iter()
        .enumerate()
    {
        let body = ok_body(&format!("good-{i}"));
        let task = serde_json::from_str::<Value>(&body).unwrap()["task_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = raw_request(
            &addr,
            raw_post(&format!("/tasks/{task}"), host, &token, &body),
            WAIT,
        )
        .await;
        assert_applied(&r.to_resp(&format!("POST with Host: {host}")));
    }
    assert_eq!(
        texts(&app.messages(&sid).await),
        vec!["via good-0", "via good-1"],
        "{}",
        app.dump(&sid).await
    );
}

#[tokio::test]
async fn wrong_path_404_and_wrong_method_405() {
    let app = App::start().await;
    let cb = app.cb();
    let tok = app.ready.callback_token.clone();
    let task = new_id();
    let body = || Some(b"{}".to_vec());
    for path in [
        "/".to_owned(),
        "/nope".to_owned(),
        "/tasks".to_owned(),
        format!("/tasks/{task}/extra"),
        format!("/v1/tasks/{task}"),
    ] {
        let r = cb
            .request("POST", &path, Some(&tok), Some("application/json"), body())
            .await;
        assert_error(&r, 404, "not_found");
    }
    // The path is checked before auth.
    let r = cb
        .request("POST", "/nope", None, Some("application/json"), body())
        .await;
    assert_error(&r, 404, "not_found");
    let r = cb.request("GET", "/nope", None, None, None).await;
    assert_error(&r, 404, "not_found");

    for method in ["GET", "PUT", "DELETE", "PATCH"] {
        let r = cb
            .request(
                method,
                &format!("/tasks/{task}"),
                Some(&tok),
                Some("application/json"),
                body(),
            )
            .await;
        assert_error(&r, 405, "method_not_allowed");
        assert_eq!(
            r.header("allow").as_deref(),
            Some("POST"),
            "Allow header: {r}"
        );
    }
    // The method is checked before auth.
    let r = cb
        .request("GET", &format!("/tasks/{task}"), None, None, None)
        .await;
    assert_error(&r, 405, "method_not_allowed");
}

#[tokio::test]
async fn missing_or_wrong_bearer_gets_401_with_www_authenticate() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let cb = app.cb();
    let task = new_id();
    let body = message(&sid, &task, "m-auth", "secret")
        .to_string()
        .into_bytes();
    let path = format!("/tasks/{task}");
    let cases: Vec<(&str, Option<String>)> = vec![
        ("no Authorization", None),
        (
            "wrong token",
            Some(format!("Bearer {}x", app.ready.callback_token)),
        ),
        (
            "the ui token",
            Some(format!("Bearer {}", app.ready.ui_token)),
        ),
        (
            "Basic scheme",
            Some(format!("Basic {}", app.ready.callback_token)),
        ),
        ("empty bearer", Some("Bearer ".to_owned())),
    ];
    for (what, auth) in cases {
        let mut rb = cb
            .http
            .post(format!("{}{path}", cb.base))
            .header("content-type", "application/json")
            .body(body.clone())
            .timeout(REQUEST_TIMEOUT);
        if let Some(a) = &auth {
            rb = rb.header("authorization", a);
        }
        let resp = rb.send().await.expect("send");
        let status = resp.status().as_u16();
        let www = resp
            .headers()
            .get("www-authenticate")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let text = resp.text().await.unwrap_or_default();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(status, 401, "{what}: {status} {text}");
        assert_eq!(json["ok"], false, "{what}: {text}");
        assert_eq!(json["error"], "unauthorized", "{what}: {text}");
        assert!(
            www.as_deref().is_some_and(|w| w.starts_with("Bearer")),
            "{what}: WWW-Authenticate: {www:?}"
        );
    }
    assert_eq!(
        app.messages(&sid).await,
        Vec::<Value>::new(),
        "nothing stored"
    );
    // The right token still works (5 failures are below the rate limit).
    assert_applied(&app.post(&message(&sid, &task, "m-auth", "secret")).await);
}

#[tokio::test]
async fn repeated_auth_failures_are_rate_limited_with_429() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let bad = app.cb().with_token("definitely-not-the-token-0000000000");
    let body = message(&sid, &new_id(), "m-rl", "x");
    for i in 1..=10 {
        let r = bad.post(&body).await;
        assert_eq!(
            r.status, 401,
            "failed attempt {i} of 10 must still be 401: {r}"
        );
        assert_error(&r, 401, "unauthorized");
    }
    let r = bad.post(&body).await;
    assert_error(&r, 429, "too_many_auth_failures");
    let retry = r
        .header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("429 needs a numeric Retry-After: {r}"));
    assert!((1..=30).contains(&retry), "Retry-After {retry}: {r}");
    // Still locked for the next wrong token, and for a missing one.
    assert_error(&bad.post(&body).await, 429, "too_many_auth_failures");
    let r = app
        .cb()
        .request(
            "POST",
            &format!("/tasks/{}", body["task_id"].as_str().unwrap()),
            None,
            Some("application/json"),
            Some(body.to_string().into_bytes()),
        )
        .await;
    assert_error(&r, 429, "too_many_auth_failures");
    assert_eq!(app.messages(&sid).await, Vec::<Value>::new());
    // The real assistant (right token) is not locked out by someone else's guessing: its
    // retries (≈ 2 s) could never outlast a 30 s cool-down, so a lockout would lose replies.
    // (docs/contract.md lists the 429 row above 401; this reading keeps delivery lossless.)
    assert_applied(&app.post(&body).await);
    // Host and path checks still come first.
    let r = app
        .cb()
        .request(
            "POST",
            "/nope",
            None,
            Some("application/json"),
            Some(b"{}".to_vec()),
        )
        .await;
    assert_error(&r, 404, "not_found");
}

#[tokio::test]
async fn malformed_requests_get_400_415_with_precise_codes() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let cb = app.cb();
    let tok = app.ready.callback_token.clone();
    let task = new_id();
    let path = format!("/tasks/{task}");
    let json_ct = Some("application/json");
    let send = |path: String, ct: Option<&'static str>, body: Vec<u8>| {
        let cb = cb.clone();
        let tok = tok.clone();
        async move { cb.request("POST", &path, Some(&tok), ct, Some(body)).await }
    };
    let good = message(&sid, &task, "m-good", "good")
        .to_string()
        .into_bytes();

    // 400 invalid_task_id
    for bad in [
        "not-a-uuid",
        "12345",
        "6df4374f-5c10-47d4-8a5c",
        "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz",
    ] {
        let r = send(format!("/tasks/{bad}"), json_ct, good.clone()).await;
        assert_error(&r, 400, "invalid_task_id");
    }
    // 415
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let r = send(path.clone(), ct, good.clone()).await;
        assert_error(&r, 415, "unsupported_media_type");
    }
    // 400 invalid_json
    for body in [
        "not json",
        "{\"session_id\":",
        "[1,2,3]",
        "\"a string\"",
        "42",
        "null",
        "",
    ] {
        let r = send(path.clone(), json_ct, body.as_bytes().to_vec()).await;
        assert_error(&r, 400, "invalid_json");
    }
    let case = |v: Value| v.to_string().into_bytes();
    // 400 missing_field
    for body in [
        json!({"status": "message", "reply_text": "x"}),
        json!({"session_id": sid, "reply_text": "x"}),
        json!({"session_id": "", "status": "message", "reply_text": "x"}),
        json!({"session_id": sid, "status": "", "reply_text": "x"}),
        json!({"session_id": 5, "status": "message", "reply_text": "x"}),
        json!({"session_id": sid, "status": null, "reply_text": "x"}),
        json!({"session_id": sid, "status": ["message"], "reply_text": "x"}),
    ] {
        let r = send(path.clone(), json_ct, case(body)).await;
        assert_error(&r, 400, "missing_field");
    }
    // 400 invalid_field
    for body in [
        json!({"session_id": sid, "status": "message", "reply_text": 5}),
        json!({"session_id": sid, "status": "message", "reply_text": "x", "message_id": {"a": 1}}),
        json!({"session_id": sid, "status": "message", "reply_text": "x", "user_message_id": 7}),
        json!({"session_id": sid, "status": "message", "reply_text": "x", "task_id": 12}),
        json!({"session_id": sid, "status": "errored", "error_message": ["x"]}),
    ] {
        let r = send(path.clone(), json_ct, case(body)).await;
        assert_error(&r, 400, "invalid_field");
    }
    // 400 task_id_mismatch
    let r = send(
        path.clone(),
        json_ct,
        case(
            json!({"task_id": new_id(), "session_id": sid, "status": "message", "reply_text": "x"}),
        ),
    )
    .await;
    assert_error(&r, 400, "task_id_mismatch");
    // 400 invalid_status
    for status in ["bogus", "MESSAGE", "done"] {
        let r = send(
            path.clone(),
            json_ct,
            case(json!({"session_id": sid, "status": status, "reply_text": "x"})),
        )
        .await;
        assert_error(&r, 400, "invalid_status");
    }
    // 400 empty_reply_text
    for body in [
        json!({"session_id": sid, "status": "message"}),
        json!({"session_id": sid, "status": "message", "reply_text": ""}),
        json!({"session_id": sid, "status": "message", "reply_text": null}),
        json!({"session_id": sid, "status": "notice"}),
        json!({"session_id": sid, "status": "notice", "reply_text": ""}),
    ] {
        let r = send(path.clone(), json_ct, case(body)).await;
        assert_error(&r, 400, "empty_reply_text");
    }
    // 400 invalid_chunk
    for body in [
        json!({"session_id": sid, "status": "stream"}),
        json!({"session_id": sid, "status": "stream", "chunk": null}),
        json!({"session_id": sid, "status": "stream", "chunk": {}}),
        json!({"session_id": sid, "status": "stream", "chunk": {"delta": "no type"}}),
    ] {
        let r = send(path.clone(), json_ct, case(body)).await;
        assert_error(&r, 400, "invalid_chunk");
    }
    assert_eq!(
        app.messages(&sid).await,
        Vec::<Value>::new(),
        "rejected requests stored something"
    );

    // The same body, well-formed, with a charset parameter and task_id omitted, is fine.
    let r = send(
        path.clone(),
        Some("application/json; charset=utf-8"),
        case(json!({"session_id": sid, "status": "message", "reply_text": "finally", "message_id": "m-fine"})),
    )
    .await;
    assert_applied(&r);
    assert_eq!(texts(&app.messages(&sid).await), vec!["finally"]);
}

#[tokio::test]
async fn unknown_fields_are_ignored() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let t = new_id();
    let body = with(
        message(&sid, &t, "m-unknown", "Extra fields are fine"),
        json!({
            "user_message_id": null,
            "chat_id": format!("sw:{sid}:chat"),
            "label": "whatever",
            "model": null,
            "brand_new_field": {"nested": [1, 2, 3]},
            "another": 42,
            "usage": {"tokens": 12},
        }),
    );
    assert_applied(&app.post(&body).await);
    let t2 = new_id();
    assert_accepted(
        &app.post(&with(
            typing(&sid, &t2, Some("um-u")),
            json!({"x-extra": true, "model": "gpt"}),
        ))
        .await,
    );
    assert_accepted(
        &app.post(&stream(
            &sid,
            &t2,
            Some("um-u"),
            json!({"type": "text-start", "id": "z", "providerMetadata": {"a": 1}}),
        ))
        .await,
    );
    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs)[0],
        "Extra fields are fine",
        "{}",
        dump_entries(&msgs)
    );
}

#[tokio::test]
async fn oversized_bodies_get_413_and_a_body_just_under_1_mib_is_accepted() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let addr = app.ready.callback_addr.clone();
    let tok = app.ready.callback_token.clone();

    // Content-Length over 1 MiB.
    let t = new_id();
    let big_text = "x".repeat(1024 * 1024 + 1024);
    let body = message(&sid, &t, "m-big", &big_text).to_string();
    let req = raw_post(&format!("/tasks/{t}"), &addr, &tok, &body);
    let r = raw_request(&addr, req, Duration::from_secs(15)).await;
    assert_error(
        &r.to_resp("POST 1 MiB + 1 KiB (Content-Length)"),
        413,
        "payload_too_large",
    );

    // Chunked, no Content-Length.
    let t = new_id();
    let body = message(&sid, &t, "m-big2", &big_text).to_string();
    let mut req = format!(
        "POST /tasks/{t} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {tok}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for part in body.as_bytes().chunks(64 * 1024) {
        req.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        req.extend_from_slice(part);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let r = raw_request(&addr, req, Duration::from_secs(15)).await;
    assert_error(
        &r.to_resp("POST 1 MiB + 1 KiB (chunked)"),
        413,
        "payload_too_large",
    );
    assert_eq!(app.messages(&sid).await, Vec::<Value>::new());

    // ≤ 1 MiB is accepted.
    let t = new_id();
    let text = "y".repeat(1_000_000);
    let r = app.post(&message(&sid, &t, "m-fits", &text)).await;
    assert_applied(&r);
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["text"].as_str().map(str::len), Some(1_000_000));
}

#[tokio::test]
async fn a_client_that_stalls_gets_408() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let addr = app.ready.callback_addr.clone();
    let tok = app.ready.callback_token.clone();
    let t = new_id();
    let body = message(&sid, &t, "m-stall", "never completed").to_string();

    // Headers complete, body stalls after a few bytes.
    let stalled_body = async {
        let mut c = RawConn::connect(&addr).await;
        let head = format!(
            "POST /tasks/{t} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {tok}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        c.send(head.as_bytes()).await.expect("send head");
        c.send(&body.as_bytes()[..10])
            .await
            .expect("send some body");
        c.read_response(Duration::from_secs(20)).await
    };
    // Headers themselves stall.
    let stalled_head = async {
        let mut c = RawConn::connect(&addr).await;
        c.send(format!("POST /tasks/{t} HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
            .await
            .expect("send partial head");
        c.read_response(Duration::from_secs(20)).await
    };
    let (rb, rh) = tokio::join!(stalled_body, stalled_head);

    let resp = rb.to_resp("body stalled after the headers");
    assert_error(&resp, 408, "request_timeout");
    assert!(
        rb.elapsed >= Duration::from_secs(8) && rb.elapsed <= Duration::from_secs(16),
        "408 after {:?}, expected ≈ 10 s",
        rb.elapsed
    );
    // A stalled header: a 408 or a closed connection, in about 10 s (not held forever).
    assert!(
        rh.status == Some(408) || (rh.status.is_none() && rh.end != "timeout"),
        "stalled headers: {rh:?}"
    );
    assert!(
        rh.elapsed <= Duration::from_secs(16),
        "stalled headers held {:?}",
        rh.elapsed
    );
    assert_eq!(app.messages(&sid).await, Vec::<Value>::new());
}

// ---------------------------------------------------------------------------------------------
// Token rotation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn callback_token_rotation_takes_effect_at_once_and_persists() {
    let mut app = App::start().await;
    let sid = app.create_chat().await;
    let old = app.ready.callback_token.clone();
    assert_applied(
        &app.post(&message(&sid, &new_id(), "m-old", "with the old token"))
            .await,
    );

    let new = app.rotate_callback_token().await;
    assert_ne!(new, old);
    assert!(new.len() >= 16, "token too short: {new:?}");

    let r = app
        .cb()
        .with_token(&old)
        .post(&message(&sid, &new_id(), "m-rej", "old token again"))
        .await;
    assert_error(&r, 401, "unauthorized");
    let r = app
        .cb()
        .with_token(&new)
        .post(&message(&sid, &new_id(), "m-new", "with the new token"))
        .await;
    assert_applied(&r);

    let s = app.ui().get("/api/settings").await;
    assert_eq!(s.status, 200, "{s}");
    assert_eq!(s.json["callback_token"], new.as_str(), "{s}");
    let file =
        std::fs::read_to_string(app.data_dir.join("callback_token")).expect("callback_token file");
    assert_eq!(file.trim(), new, "callback_token file not updated");

    app.restart().await;
    assert_eq!(
        app.ready.callback_token, new,
        "rotated token lost on restart"
    );
    assert_applied(
        &app.post(&message(&sid, &new_id(), "m-after", "after restart"))
            .await,
    );
    let r = app
        .cb()
        .with_token(&old)
        .post(&message(
            &sid,
            &new_id(),
            "m-rej2",
            "old token after restart",
        ))
        .await;
    assert_error(&r, 401, "unauthorized");
    assert_eq!(
        texts(&app.messages(&sid).await),
        vec!["with the old token", "with the new token", "after restart"]
    );
}

#[tokio::test]
async fn a_non_string_occurred_at_is_ignored_and_the_message_kept_in_arrival_order() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    // A real timestamp two minutes ago first: the others arrive later and go after it.
    let earlier = now_micros() - 120_000_000;
    assert_applied(
        &app.post(&with(
            message(&sid, &new_id(), "t-ok", "with a timestamp"),
            json!({"occurred_at": rfc3339(earlier)}),
        ))
        .await,
    );
    let before = now_micros();
    let unusable = [
        ("t-ms", json!(1_733_050_000_000_i64)),
        ("t-float", json!(1_733_050_000.5)),
        ("t-true", json!(true)),
        (
            "t-object",
            json!({"epoch_ms": 1_733_050_000_000_i64, "tz": ["UTC"]}),
        ),
        ("t-array", json!(["2026-11-29T12:35:28Z"])),
        ("t-long", json!("x".repeat(600))),
    ];
    for (mid, at) in &unusable {
        let body = with(
            message(&sid, &new_id(), mid, &format!("occurred_at {at}")),
            json!({"occurred_at": at}),
        );
        let r = app.post(&body).await;
        assert_applied(&r);
        // Still deduped by message_id.
        assert_duplicate(&app.post(&body).await);
    }
    let after = now_micros();

    let msgs = app.messages(&sid).await;
    let dump = dump_entries(&msgs);
    let mut want = vec!["with a timestamp".to_owned()];
    want.extend(unusable.iter().map(|(_, at)| format!("occurred_at {at}")));
    assert_eq!(texts(&msgs), want, "ordered by arrival:\n{dump}");
    assert_eq!(msgs[0]["sort_key"], json!(earlier), "{dump}");
    for m in &msgs[1..] {
        let k = m["sort_key"].as_i64().unwrap_or(-1);
        assert!(
            k >= before - 2_000_000 && k <= after + 2_000_000,
            "sort_key {k} not ≈ arrival [{before}, {after}]:\n{dump}"
        );
    }
}

#[tokio::test]
async fn a_final_message_with_a_leftover_cursor_settles_the_finished_stream_at_once() {
    // A streamed turn, then its final `message` for the same task whose text still ends in the
    // draft cursor: after `finish` the cursor is a leftover, the message is the final text.
    let app = App::start().await;
    let sid = app.create_chat().await;
    let mut ev = app.events(SseOpts::after(0)).await;
    let t = new_id();
    let um = Some("um-leftover");
    for chunk in [
        json!({"type": "start", "messageId": t}),
        json!({"type": "text-start", "id": "p1"}),
        json!({"type": "text-delta", "id": "p1", "delta": "Hello "}),
        json!({"type": "text-delta", "id": "p1", "delta": "streamed "}),
        json!({"type": "text-delta", "id": "p1", "delta": "world ▉"}),
        json!({"type": "text-end", "id": "p1"}),
        json!({"type": "finish", "finishReason": "stop"}),
    ] {
        assert_accepted(&app.post(&stream(&sid, &t, um, chunk)).await);
    }
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "one draft:\n{}", dump_entries(&msgs));
    assert_eq!(msgs[0]["draft"], true, "{}", dump_entries(&msgs));
    let id = msgs[0]["id"].clone();

    let last = with(
        message(&sid, &t, "m-leftover", "\n\nHello streamed world ▉"),
        json!({"user_message_id": "um-leftover"}),
    );
    assert_applied(&app.post(&last).await);
    // At once, not after the inactivity timeout: one settled entry, in place.
    let msgs = app.messages(&sid).await;
    assert_eq!(msgs.len(), 1, "one entry:\n{}", dump_entries(&msgs));
    assert_eq!(
        msgs[0]["id"],
        id,
        "settled in place:\n{}",
        dump_entries(&msgs)
    );
    assert_eq!(msgs[0]["draft"], false, "{}", dump_entries(&msgs));
    assert_eq!(text_of(&msgs[0]), "Hello streamed world");
    assert_eq!(msgs[0]["message_id"], "m-leftover");
    // A retry of it changes nothing.
    assert_duplicate(&app.post(&last).await);
    assert_eq!(app.messages(&sid).await, msgs);

    let sentinel = new_id();
    assert_applied(
        &app.post(&message(&sid, &new_id(), &sentinel, "sentinel"))
            .await,
    );
    let evs = ev.until_message(&sentinel).await;
    let dumped = dump_events(&evs);
    let added: Vec<&SseEvent> = evs
        .iter()
        .filter(|e| e.kind() == "message_added" && e.message()["text"] != "sentinel")
        .collect();
    assert_eq!(added.len(), 1, "no second entry was ever shown:\n{dumped}");
    assert_eq!(added[0].message()["id"], id, "{dumped}");
}
