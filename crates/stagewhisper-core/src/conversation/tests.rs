//! The conversation with a manual clock on a real SQLite file: timers fire only when the
//! test moves time, so nothing sleeps.
use super::*;
use crate::clock::ManualClock;
use crate::protocol::parse_callback;
use crate::store::load;
use chrono::DateTime;
use serde_json::{json, Value};
use std::sync::Arc;

const TASK: &str = "3dac4154-7224-4cd4-88a0-14428dc826d7";

/// A conversation on a fresh SQLite file (kept while the `TempDir` lives) with a manual clock;
/// `timeout_ms` is the typing timeout. Shared by the core's unit tests.
pub(crate) async fn start(timeout_ms: i64) -> (Conversation, Arc<ManualClock>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (store, conn) = Store::open(&dir.path().join("t.db"), Default::default())
        .await
        .unwrap();
    let clock = ManualClock::new(DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let c = Conversation::start(
        store,
        conn,
        clock.clone(),
        Settings {
            typing_timeout_ms: timeout_ms,
            insights_grace_ms: 60_000,
        },
    )
    .await
    .unwrap();
    (c, clock, dir)
}

async fn post(c: &Conversation, body: serde_json::Value) -> Outcome {
    c.submit(parse_callback(TASK, body.to_string().as_bytes()).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_failed_commit_writes_nothing_and_answers_storage_unavailable() {
    let (c, _clock, dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    let msg = |id: &str, text: &str| {
        parse_callback(
            TASK,
            json!({"session_id": s, "status": "message", "message_id": id, "reply_text": text})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    };
    // A second connection makes SQLite itself refuse one row, inside the writer's commit.
    use sqlx::ConnectOptions;
    let mut other = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("t.db"))
        .connect()
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.text = 'boom' \
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )
    .execute(&mut other)
    .await
    .unwrap();
    assert_eq!(c.submit(msg("m1", "one")).await.unwrap(), Outcome::Applied);
    let err = c.submit(msg("m2", "boom")).await.unwrap_err();
    assert!(matches!(err, CoreError::StorageUnavailable(_)), "{err:?}");
    // Nothing of the failed batch stayed, in the database or in memory: the same
    // message_id is new once SQLite accepts it.
    assert_eq!(
        c.submit(msg("m3", "three")).await.unwrap(),
        Outcome::Applied
    );
    sqlx::query("DROP TRIGGER refuse")
        .execute(&mut other)
        .await
        .unwrap();
    assert_eq!(c.submit(msg("m2", "boom")).await.unwrap(), Outcome::Applied);
    assert_eq!(
        c.submit(msg("m2", "boom")).await.unwrap(),
        Outcome::Duplicate
    );
    let texts: Vec<String> = c
        .messages(&s)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(texts, ["one", "three", "boom"]);
    let events = c.store().events_after(0, 1000).await.unwrap();
    let added = events
        .iter()
        .filter(|(_, data)| data.contains("\"type\":\"message_added\""))
        .count();
    assert_eq!(added, 3, "no event of the failed batch was logged");
}

#[tokio::test]
async fn a_constraint_failing_late_in_a_commit_takes_its_earlier_rows_back_too() {
    // Rows go in as `INSERT OR ROLLBACK` (no statement journal): a violation ends the whole
    // transaction at once; the writer must not leave the message rows written before it.
    let (c, _clock, dir) = start(30_000).await;
    let s = c.create_session(true, None).await.unwrap().session_id;
    let insights = format!("insights:{s}");
    post(
        &c,
        json!({"session_id": s, "status": "message", "message_id": "m1", "reply_text": "one"}),
    )
    .await;
    // An insight writes its row, then its `insight_added` into `events` (the next id).
    // Another connection takes that event's id: the message row goes in first, then the
    // event clashes on the primary key.
    use sqlx::ConnectOptions;
    let mut other = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("t.db"))
        .connect()
        .await
        .unwrap();
    let taken = c.store().last_event_id().await.unwrap() + 2;
    sqlx::query("INSERT INTO events (id, session_id, data) VALUES (?, 'elsewhere', '{\"type\":\"marker\"}')")
        .bind(taken)
        .execute(&mut other)
        .await
        .unwrap();
    let two = parse_callback(
        TASK,
        json!({"session_id": insights, "status": "message", "message_id": "m2", "reply_text": "two"})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let err = c.submit(two.clone()).await.unwrap_err();
    assert!(matches!(err, CoreError::StorageUnavailable(_)), "{err:?}");
    let texts = "SELECT text FROM messages ORDER BY id";
    let stored: Vec<String> = sqlx::query_scalar(texts)
        .fetch_all(&mut other)
        .await
        .unwrap();
    assert_eq!(
        stored,
        ["one"],
        "the failed commit's message row was taken back"
    );
    // After the reload the ids move past the taken one and the resend is accepted once.
    assert_eq!(c.submit(two.clone()).await.unwrap(), Outcome::Applied);
    assert_eq!(c.submit(two).await.unwrap(), Outcome::Duplicate);
    let stored: Vec<String> = sqlx::query_scalar(texts)
        .fetch_all(&mut other)
        .await
        .unwrap();
    assert_eq!(stored, ["one", "two"]);
}

#[tokio::test]
async fn ids_of_a_deleted_session_are_never_handed_out_again() {
    let (c, _clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    for n in 0..3 {
        post(&c, json!({"session_id": s, "status": "message", "message_id": format!("m{n}"), "reply_text": format!("reply {n}")})).await;
    }
    let highest = c.messages(&s).await.unwrap().last().unwrap().id;
    let last_event = c.store().last_event_id().await.unwrap();
    c.delete_session(&s).await.unwrap();
    // What a restart would start from: past the deleted rows, though none is left.
    let mut conn = c.store().connect_reader().await.unwrap();
    let next = load::next_id(&mut conn).await.unwrap();
    assert!(next > highest, "{next} <= {highest}");
    assert!(next > last_event, "{next} <= {last_event}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM messages")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn typing_clears_when_the_inactivity_timer_runs_out() {
    let (c, clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    post(
        &c,
        json!({"session_id": s, "status": "typing", "user_message_id": "u1", "label": "thinking"}),
    )
    .await;
    assert_eq!(
        c.typing(&s).await.unwrap()[0].label.as_deref(),
        Some("thinking")
    );
    clock.advance_ms(20_000);
    post(
        &c,
        json!({"session_id": s, "status": "typing", "user_message_id": "u1"}),
    )
    .await;
    clock.advance_ms(29_000); // 49 s after the first, 29 s after the keepalive
    c.tick().await.unwrap();
    assert_eq!(c.typing(&s).await.unwrap().len(), 1, "kept alive");
    let mut view = c
        .hub()
        .subscribe(c.store().clone(), c.store().last_event_id().await.unwrap());
    clock.advance_ms(1_000);
    c.tick().await.unwrap();
    assert!(c.typing(&s).await.unwrap().is_empty(), "expired");
    // A live-only event to the views following the stream: no cursor, never in the log.
    let stopped = view.next().await.unwrap();
    assert!(stopped.is_live(), "{stopped:?}");
    let v: Value = serde_json::from_str(&stopped.json).unwrap();
    assert_eq!(
        (&v["type"], &v["reason"], &v["typing"]["scope"], &v["live"]),
        (
            &json!("typing_stopped"),
            &json!("timeout"),
            &json!("u1"),
            &json!(true)
        ),
        "{v}"
    );
    assert!(v.get("id").is_none(), "{v}");
}

/// A typing callback decided on its caller's task (the actor idle) still starts the actor's
/// timer: the indicator stops on its own, with no `tick()` from the test.
#[tokio::test]
async fn a_timer_set_by_a_callback_decided_on_its_callers_task_fires_by_itself() {
    let (c, clock, _dir) = start(200).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    let mut view = c
        .hub()
        .subscribe(c.store().clone(), c.store().last_event_id().await.unwrap());
    post(
        &c,
        json!({"session_id": s, "status": "typing", "user_message_id": "u1", "label": "thinking"}),
    )
    .await;
    clock.advance_ms(300);
    // Rung by the callback, the actor reads its next timer again; the clock is past it by then
    // (or it sleeps the rest of it), so the tick comes without the test.
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let e = view.next().await.unwrap();
            let v: Value = serde_json::from_str(&e.json).unwrap();
            if v["type"] == "typing_stopped" {
                return v;
            }
        }
    })
    .await
    .expect("the typing indicator never stopped by itself");
    assert_eq!(stopped["reason"], "timeout", "{stopped}");
    assert!(c.typing(&s).await.unwrap().is_empty());
}

#[tokio::test]
async fn typing_is_never_written_to_disk() {
    let (c, clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    let mut view = c
        .hub()
        .subscribe(c.store().clone(), c.store().last_event_id().await.unwrap());
    let commits = c.store().commits();
    let logged = c.store().last_event_id().await.unwrap();
    for scope in ["u1", "u2"] {
        post(
            &c,
            json!({"session_id": s, "status": "typing", "user_message_id": scope, "label": "thinking"}),
        )
        .await;
    }
    post(
        &c,
        json!({"session_id": s, "status": "tool_call", "user_message_id": "u1", "label": "Searching"}),
    )
    .await;
    post(
        &c,
        json!({"session_id": s, "status": "completed", "user_message_id": "u2"}),
    )
    .await;
    clock.advance_ms(30_000);
    c.tick().await.unwrap();
    assert_eq!(c.store().commits(), commits, "no commit for typing");
    assert_eq!(c.store().last_event_id().await.unwrap(), logged);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let e = view.next().await.unwrap();
        assert!(e.is_live(), "{e:?}");
        let v: Value = serde_json::from_str(&e.json).unwrap();
        let ty = v["type"].as_str().unwrap();
        let what = if ty == "typing_started" {
            &v["typing"]["label"]
        } else {
            &v["reason"]
        };
        seen.push(format!(
            "{ty} {} {}",
            v["typing"]["scope"].as_str().unwrap(),
            what.as_str().unwrap()
        ));
    }
    assert_eq!(
        seen,
        [
            "typing_started u1 thinking",
            "typing_started u2 thinking",
            "typing_started u1 Searching",
            "typing_stopped u2 completed",
            "typing_stopped u1 timeout",
        ]
    );
}

#[tokio::test]
async fn typing_after_completed_does_not_stick() {
    let (c, clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    post(
        &c,
        json!({"session_id": s, "status": "typing", "user_message_id": "u1"}),
    )
    .await;
    post(
        &c,
        json!({"session_id": s, "status": "completed", "user_message_id": "u1"}),
    )
    .await;
    assert!(c.typing(&s).await.unwrap().is_empty());
    post(
        &c,
        json!({"session_id": s, "status": "typing", "user_message_id": "u1"}),
    )
    .await;
    assert_eq!(c.typing(&s).await.unwrap().len(), 1);
    clock.advance_ms(30_000);
    c.tick().await.unwrap();
    assert!(c.typing(&s).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_log_replays_every_event_exactly_as_it_was_emitted() {
    let (c, _clock, _dir) = start(30_000).await;
    let mut live = c.hub().subscribe(c.store().clone(), 0);
    let s = c.create_session(true, None).await.unwrap().session_id;
    // Logged by reference (final assistant rows, notices, errors) and in full (drafts that
    // change, user messages whose delivery changes, insights).
    post(&c, json!({"session_id": s, "status": "message", "message_id": "a", "reply_text": "Final \"answer\" é"})).await;
    post(&c, json!({"session_id": s, "status": "notice", "message_id": "n", "reply_text": "Working on it"})).await;
    post(&c, json!({"session_id": s, "status": "errored", "error_code": "E1", "error_message": "It broke"})).await;
    post(&c, json!({"session_id": s, "status": "stream", "chunk": {"type": "text-delta", "id": "p", "delta": "Dra"}})).await;
    post(&c, json!({"session_id": s, "status": "stream", "chunk": {"type": "text-delta", "id": "p", "delta": "ft"}})).await;
    post(&c, json!({"session_id": s, "status": "message", "message_id": "d", "reply_text": "Draft done"})).await;
    post(&c, json!({"session_id": format!("insights:{s}"), "status": "message", "message_id": "i", "reply_text": "Tip"})).await;
    let user = c.user_message(&s, "Hello").await.unwrap();
    c.set_delivery(
        user.id,
        DeliveryUpdate {
            state: DeliveryState::Sent,
            task_id: None,
            error: None,
        },
    )
    .await
    .unwrap();
    let last = c.store().last_event_id().await.unwrap();
    let mut emitted = Vec::new();
    loop {
        let e = live.next().await.unwrap();
        emitted.push((e.id, serde_json::from_str::<Value>(&e.json).unwrap()));
        if e.id == last {
            break;
        }
    }
    let mut replay = c.hub().subscribe(c.store().clone(), 0);
    for (id, json) in &emitted {
        let e = replay.next().await.unwrap();
        assert_eq!(e.id, *id);
        assert_eq!(
            &serde_json::from_str::<Value>(&e.json).unwrap(),
            json,
            "event {id}"
        );
    }
    let mut reader = c.store().connect_reader().await.unwrap();
    let logged: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM messages WHERE logged = 1 ORDER BY id")
            .fetch_all(&mut reader)
            .await
            .unwrap();
    assert_eq!(
        logged,
        ["assistant", "notice", "error"],
        "the final message, the notice and the error are their own events"
    );
    let in_log: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE id IN (SELECT id FROM messages WHERE logged = 1)",
    )
    .fetch_one(&mut reader)
    .await
    .unwrap();
    assert_eq!(in_log, 0, "and have no row in `events`");
    // Logged by an earlier version: the same events as references (`message_row`, data
    // `{"type","session_id"}`) in `events`. Same replay.
    let mut w = sqlx::ConnectOptions::connect(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(c.store().path()),
    )
    .await
    .unwrap();
    let old = sqlx::query(
        "INSERT INTO events (id, session_id, data, message_row) \
         SELECT id, session_id, json_object('type', 'message_added', 'session_id', \
         session_id), id FROM messages WHERE logged = 1",
    )
    .execute(&mut w)
    .await
    .unwrap();
    assert_eq!(old.rows_affected(), 3);
    sqlx::query("UPDATE messages SET logged = 0")
        .execute(&mut w)
        .await
        .unwrap();
    let mut replay = c.hub().subscribe(c.store().clone(), 0);
    for (id, json) in &emitted {
        let e = replay.next().await.unwrap();
        assert_eq!(
            &serde_json::from_str::<Value>(&e.json).unwrap(),
            json,
            "event {id} (old form)"
        );
    }
}

#[tokio::test]
async fn the_merged_log_pages_in_order_without_gaps_or_repeats() {
    // Rows that are their own event interleave with events logged in `events`; every page
    // boundary must land between them correctly.
    let (c, _clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    for n in 0..120 {
        // A user message and its delivery: two events in `events`; the reply is its own.
        let user = c.user_message(&s, &format!("question {n}")).await.unwrap();
        c.set_delivery(
            user.id,
            DeliveryUpdate {
                state: DeliveryState::Sent,
                task_id: None,
                error: None,
            },
        )
        .await
        .unwrap();
        let scope = user.message_id.clone().unwrap();
        post(&c, json!({"session_id": s, "status": "message", "user_message_id": scope, "message_id": format!("m{n}"), "reply_text": format!("reply {n}")})).await;
    }
    let whole = c.store().events_after(0, 10_000).await.unwrap();
    let types: Vec<String> = whole
        .iter()
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types.iter().filter(|t| *t == "message_added").count(), 240);
    assert_eq!(
        types.iter().filter(|t| *t == "message_updated").count(),
        120
    );
    assert!(
        whole.windows(2).all(|w| w[0].0 < w[1].0),
        "strictly increasing"
    );
    for page in [1, 2, 3, 7, 50] {
        let mut cursor = 0;
        let mut paged = Vec::new();
        loop {
            let rows = c.store().events_after(cursor, page).await.unwrap();
            let Some(last) = rows.last() else { break };
            cursor = last.0;
            paged.extend(rows);
        }
        assert_eq!(paged, whole, "pages of {page}");
    }
    assert_eq!(
        c.store().last_event_id().await.unwrap(),
        whole.last().unwrap().0
    );
}

#[tokio::test]
async fn an_interrupted_draft_settles_as_is_on_timeout() {
    let (c, clock, _dir) = start(5_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    for chunk in [
        json!({"type": "text-start", "id": "p1"}),
        json!({"type": "text-delta", "id": "p1", "delta": "Half an ans"}),
    ] {
        post(
            &c,
            json!({"session_id": s, "status": "stream", "chunk": chunk}),
        )
        .await;
    }
    let m = c.messages(&s).await.unwrap();
    assert_eq!(
        (m.len(), m[0].draft, m[0].text.as_str()),
        (1, true, "Half an ans")
    );
    clock.advance_ms(4_999);
    c.tick().await.unwrap();
    assert!(c.messages(&s).await.unwrap()[0].draft);
    clock.advance_ms(1);
    c.tick().await.unwrap();
    let m = c.messages(&s).await.unwrap();
    assert_eq!(
        (m.len(), m[0].draft, m[0].text.as_str()),
        (1, false, "Half an ans")
    );
}

#[tokio::test]
async fn insights_session_ends_after_its_grace_period() {
    let (c, clock, _dir) = start(30_000).await;
    let call = c.create_session(true, None).await.unwrap();
    let ins = call.insights_session_id.clone().unwrap();
    c.end_call(&call.session_id).await.unwrap();
    clock.advance_ms(60_000);
    let reply = json!({"session_id": ins, "status": "message", "message_id": "a", "reply_text": "late but in time"});
    assert_eq!(post(&c, reply).await, Outcome::Applied);
    clock.advance_ms(1);
    let reply = json!({"session_id": ins, "status": "message", "message_id": "b", "reply_text": "too late"});
    assert_eq!(post(&c, reply).await, Outcome::SessionEnded);
    // The chat of an ended call stays open for the review.
    let chat = json!({"session_id": call.session_id, "status": "message", "message_id": "c", "reply_text": "review"});
    assert_eq!(post(&c, chat).await, Outcome::Applied);
    assert_eq!(c.insights(&call.session_id).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_final_message_with_a_leftover_cursor_settles_the_finished_stream() {
    // After `finish`, a trailing cursor on the task's final message is a leftover: the
    // message settles the stream's draft in place, at once, and adds no second entry.
    let (c, clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    for chunk in [
        json!({"type": "start"}),
        json!({"type": "text-start", "id": "p1"}),
        json!({"type": "text-delta", "id": "p1", "delta": "Hello "}),
        json!({"type": "text-delta", "id": "p1", "delta": "streamed "}),
        json!({"type": "text-delta", "id": "p1", "delta": "world \u{2589}"}),
        json!({"type": "text-end", "id": "p1"}),
        json!({"type": "finish"}),
    ] {
        post(
            &c,
            json!({"session_id": s, "status": "stream", "chunk": chunk}),
        )
        .await;
    }
    let m = c.messages(&s).await.unwrap();
    assert_eq!(
        (m.len(), m[0].draft, m[0].text.as_str()),
        (1, true, "Hello streamed world")
    );
    let draft_id = m[0].id;
    let last = json!({"session_id": s, "status": "message", "message_id": "m-final",
        "reply_text": "\n\nHello streamed world \u{2589}"});
    assert_eq!(post(&c, last.clone()).await, Outcome::Applied);
    let settled = |m: &[MessageView]| {
        m.iter()
            .map(|m| (m.id, m.draft, m.text.clone()))
            .collect::<Vec<_>>()
    };
    let want = vec![(draft_id, false, "Hello streamed world".to_string())];
    assert_eq!(settled(&c.messages(&s).await.unwrap()), want, "at once");
    assert_eq!(post(&c, last).await, Outcome::Duplicate);
    // Nothing is left for the inactivity timer to settle.
    clock.advance_ms(30_000);
    c.tick().await.unwrap();
    assert_eq!(
        settled(&c.messages(&s).await.unwrap()),
        want,
        "after the timeout"
    );
}

#[tokio::test]
async fn live_events_reach_followers_without_moving_the_cursor_and_are_never_replayed() {
    let (c, _clock, _dir) = start(30_000).await;
    let before = c.store().last_event_id().await.unwrap();
    let mut sub = c.hub().subscribe(c.store().clone(), before);
    let s = c.create_session(true, None).await.unwrap().session_id;
    let logged = sub.next().await.unwrap();
    assert!(!logged.is_live());
    c.hub().publish_live(Change::AudioLevel {
        mic: Some(0.5),
        system: None,
    });
    let live = sub.next().await.unwrap();
    assert!(live.is_live(), "{live:?}");
    assert_eq!(live.event_type(), "audio_level");
    let v: serde_json::Value = serde_json::from_str(&live.json).unwrap();
    assert_eq!(
        (v["type"].as_str(), &v["live"]),
        (Some("audio_level"), &json!(true))
    );
    assert_eq!(sub.cursor(), logged.id, "a live event is no cursor");
    c.end_call(&s).await.unwrap();
    assert_eq!(sub.next().await.unwrap().id, logged.id + 1);
    // A reader resuming from the start reads the log only: the live event is not in it.
    let mut replay = c.hub().subscribe(c.store().clone(), before);
    let mut seen = Vec::new();
    while replay.cursor() < c.store().last_event_id().await.unwrap() {
        seen.push(replay.next().await.unwrap());
    }
    assert!(seen.iter().all(|e| !e.is_live()), "{seen:?}");
}

#[tokio::test]
async fn a_reply_streamed_into_its_row_is_stored_with_when_its_text_last_changed() {
    // `edited_at` (migration 0013): `received_at` is when the row first appeared, `edited_at`
    // when its text was last replaced; a message stored once has none.
    let (c, clock, _dir) = start(30_000).await;
    let s = c.create_session(false, None).await.unwrap().session_id;
    let at = |ms: i64| crate::clock::fmt_time(DateTime::from_timestamp_millis(ms).unwrap());
    let t0 = 1_800_000_000_000;
    let chunk = |delta: &str| {
        json!({"session_id": s, "status": "stream",
               "chunk": {"type": "text-delta", "id": "p", "delta": delta}})
    };
    post(&c, chunk("Hel")).await;
    let first = c.messages(&s).await.unwrap();
    assert_eq!(
        (first[0].draft, first[0].edited_at.as_deref()),
        (true, None)
    );
    clock.advance_ms(2_000);
    post(&c, chunk("lo")).await;
    let grown = c.messages(&s).await.unwrap();
    assert_eq!(grown[0].edited_at, Some(at(t0 + 2_000)));
    clock.advance_ms(3_000);
    let last = json!({"session_id": s, "status": "message", "message_id": "m-final",
        "reply_text": "Hello there"});
    assert_eq!(post(&c, last).await, Outcome::Applied);
    let plain = json!({"session_id": s, "status": "message", "message_id": "m-2",
        "reply_text": "A second reply"});
    assert_eq!(post(&c, plain).await, Outcome::Applied);
    let m = c.messages(&s).await.unwrap();
    let seen: Vec<_> = m
        .iter()
        .map(|m| {
            (
                m.text.as_str(),
                m.draft,
                m.received_at.clone(),
                m.edited_at.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("Hello there", false, at(t0), Some(at(t0 + 5_000))),
            ("A second reply", false, at(t0 + 5_000), None),
        ]
    );
    // The API's JSON carries it (and leaves it out when there is none), the log likewise.
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(v[0]["edited_at"], json!(at(t0 + 5_000)));
    assert!(v[1].get("edited_at").is_none(), "{v}");
    let log = c.store().events_after(0, 100).await.unwrap();
    let updated: Vec<Value> = log
        .iter()
        .map(|(_, e)| serde_json::from_str::<Value>(e).unwrap())
        .filter(|e| e["message"]["text"] == "Hello there")
        .collect();
    assert!(!updated.is_empty());
    assert!(updated
        .iter()
        .all(|e| e["message"]["edited_at"] == json!(at(t0 + 5_000))));
}
