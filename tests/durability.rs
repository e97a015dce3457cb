//! Durability: a SIGKILL in the middle of a flood loses nothing that was acknowledged, the
//! event stream resumes from a cursor exactly, across restarts, and the dedupe index a restart
//! rebuilds from the stored keys refuses a retry and a content re-send of an early message.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const TOTAL: usize = 2_000;
const SENDERS: usize = 8;
const KILL_AFTER_ACKS: usize = 400;

fn flood_body(sid: &str, i: usize) -> Value {
    // A task per message: no user_message_id, so every message is its own scope.
    json!({
        "task_id": uuid::Uuid::from_u128(0x5157_0000_0000_0000_0000_0000_0000_0000 + i as u128).to_string(),
        "session_id": sid,
        "status": "message",
        "message_id": format!("flood-{i:04}"),
        "reply_text": format!("Flood message number {i}"),
    })
}

/// Sends messages `0..TOTAL` from `SENDERS` concurrent senders (sender k sends k, k+8, …).
/// Returns the answers per message index; a sender stops at its first transport error.
async fn flood(
    cb: CbClient,
    sid: String,
    stop_on_error: bool,
    acked: Arc<AtomicUsize>,
) -> BTreeMap<usize, Result<Resp, String>> {
    let results = Arc::new(Mutex::new(BTreeMap::new()));
    let failed = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for k in 0..SENDERS {
        let cb = cb.clone();
        let sid = sid.clone();
        let results = results.clone();
        let acked = acked.clone();
        let failed = failed.clone();
        handles.push(tokio::spawn(async move {
            for i in (k..TOTAL).step_by(SENDERS) {
                if stop_on_error && failed.load(Ordering::SeqCst) {
                    return;
                }
                let body = flood_body(&sid, i);
                let task = body["task_id"].as_str().unwrap().to_owned();
                match cb.try_post_to(&task, &body).await {
                    Ok(r) => {
                        if (200..300).contains(&r.status) {
                            acked.fetch_add(1, Ordering::SeqCst);
                        }
                        results.lock().unwrap().insert(i, Ok(r));
                    }
                    Err(e) => {
                        results.lock().unwrap().insert(i, Err(e.to_string()));
                        if stop_on_error {
                            failed.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("sender task");
    }
    let map = std::mem::take(&mut *results.lock().unwrap());
    map
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_a_flood_loses_no_acknowledged_message() {
    let mut app = App::start().await;
    let sid = app.create_chat().await;

    // Flood, and SIGKILL the binary once enough messages were acknowledged.
    let acked = Arc::new(AtomicUsize::new(0));
    let sending = tokio::spawn(flood(app.cb(), sid.clone(), true, acked.clone()));
    let t0 = Instant::now();
    while acked.load(Ordering::SeqCst) < KILL_AFTER_ACKS && !sending.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "flood too slow: {} acks in 60 s",
            acked.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    app.kill9();
    let first = tokio::time::timeout(Duration::from_secs(60), sending)
        .await
        .expect("senders did not stop after the kill")
        .expect("sender task");

    let mut acked_ids = BTreeSet::new();
    for (i, r) in &first {
        if let Ok(r) = r {
            assert!(
                r.status == 200 && r.json["ok"] == true && !r.is_duplicate() && !r.is_ignored(),
                "flood message {i}: {r}"
            );
            acked_ids.insert(format!("flood-{i:04}"));
        }
    }
    eprintln!(
        "killed after {} acknowledged of {TOTAL} ({} attempted)",
        acked_ids.len(),
        first.len()
    );
    assert!(
        !acked_ids.is_empty(),
        "nothing was acknowledged before the kill"
    );

    // Restart on the same data dir: every acknowledged message is there.
    app.restart().await;
    let msgs = app.messages(&sid).await;
    let stored: Vec<String> = msgs
        .iter()
        .map(|m| m["message_id"].as_str().unwrap_or("?").to_owned())
        .collect();
    let stored_set: HashSet<&String> = stored.iter().collect();
    assert_eq!(
        stored_set.len(),
        stored.len(),
        "a message is stored twice after the kill"
    );
    let lost: Vec<&String> = acked_ids
        .iter()
        .filter(|m| !stored_set.contains(m))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged messages lost by SIGKILL (first: {:?}); {} stored",
        lost.len(),
        &lost[..lost.len().min(10)],
        stored.len()
    );
    for m in &msgs {
        let mid = m["message_id"].as_str().unwrap_or("?");
        let i: usize = mid
            .trim_start_matches("flood-")
            .parse()
            .unwrap_or(usize::MAX);
        assert_eq!(
            text_of(m),
            format!("Flood message number {i}"),
            "stored text of {mid}"
        );
    }

    // Resend everything: each message exactly once; the acknowledged ones answer duplicate.
    let second = flood(app.cb(), sid.clone(), false, Arc::new(AtomicUsize::new(0))).await;
    assert_eq!(second.len(), TOTAL);
    for (i, r) in &second {
        let r = r
            .as_ref()
            .unwrap_or_else(|e| panic!("resend {i}: transport error {e}"));
        assert!(r.status == 200 && r.json["ok"] == true, "resend {i}: {r}");
        if acked_ids.contains(&format!("flood-{i:04}")) {
            assert!(
                r.is_duplicate(),
                "resend of acknowledged message {i} must be duplicate: {r}"
            );
        }
    }
    let msgs = app.messages(&sid).await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for m in &msgs {
        *counts
            .entry(m["message_id"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let twice: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "stored more than once: {twice:?}");
    assert_eq!(
        counts.len(),
        TOTAL,
        "expected all {TOTAL} messages exactly once"
    );
    assert!(drafts(&msgs).is_empty());

    // The event log survived the kill too: exactly one message_added per message.
    let sentinel = new_id();
    assert_applied(
        &app.post(&message(&sid, &new_id(), &sentinel, "sentinel"))
            .await,
    );
    let mut ev = app.events(SseOpts::after(0)).await;
    let evs = ev
        .until(
            "the sentinel's message_added",
            Duration::from_secs(30),
            |e| e.kind() == "message_added" && e.message()["message_id"] == sentinel.as_str(),
        )
        .await;
    let cursors: Vec<u64> = evs.iter().map(SseEvent::cursor).collect();
    if let Some(w) = cursors.windows(2).find(|w| w[0] >= w[1]) {
        panic!(
            "cursors not strictly increasing: {} then {} ({} events read)",
            w[0],
            w[1],
            evs.len()
        );
    }
    let mut added: BTreeMap<String, usize> = BTreeMap::new();
    for e in evs.iter().filter(|e| e.kind() == "message_added") {
        *added
            .entry(e.message()["message_id"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let bad: Vec<(&String, &usize)> = added.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        bad.is_empty(),
        "message_added announced more than once: {bad:?}"
    );
    let missing: Vec<&String> = counts.keys().filter(|m| !added.contains_key(*m)).collect();
    assert!(
        missing.is_empty(),
        "{} stored messages have no message_added event (first: {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Reads the stream until the `message_added` of `message_id`.
async fn read_to(ev: &mut EventStream, message_id: &str) -> Vec<SseEvent> {
    let mid = message_id.to_owned();
    ev.until(&format!("message_added of {message_id}"), WAIT, move |e| {
        e.kind() == "message_added" && e.message()["message_id"] == mid.as_str()
    })
    .await
}

fn summary(evs: &[SseEvent]) -> Vec<(u64, String, Value)> {
    evs.iter()
        .map(|e| (e.cursor(), e.kind(), e.json()))
        .collect()
}

/// Asserts that `got` is exactly the events of `reference` with a cursor above `n`.
#[track_caller]
fn assert_suffix(what: &str, got: &[SseEvent], reference: &[SseEvent], n: u64) {
    let want: Vec<SseEvent> = reference
        .iter()
        .filter(|e| e.cursor() > n)
        .cloned()
        .collect();
    let g = summary(got);
    let w = summary(&want);
    if g != w {
        panic!(
            "{what}: resumed stream is not exactly the events after {n}\n--- got ---\n{}--- expected ---\n{}",
            dump_events(got),
            dump_events(&want)
        );
    }
}

async fn post_n(app: &App, sid: &str, range: std::ops::Range<usize>) {
    for i in range {
        assert_applied(
            &app.post(&message(
                sid,
                &new_id(),
                &format!("ev-{i}"),
                &format!("event test {i}"),
            ))
            .await,
        );
    }
}

#[tokio::test]
async fn event_stream_resumes_after_a_cursor_exactly_across_restarts() {
    let mut app = App::start().await;
    let sid = app.create_chat().await;
    post_n(&app, &sid, 0..10).await;

    // Read, and disconnect at message 5's event.
    let mut ev = app.events(SseOpts::after(0)).await;
    assert!(
        ev.content_type.starts_with("text/event-stream"),
        "content-type {:?}",
        ev.content_type
    );
    let first = read_to(&mut ev, "ev-5").await;
    let n = first.last().unwrap().cursor();
    drop(ev);

    post_n(&app, &sid, 10..20).await;

    // The reference: everything from the start.
    let mut full = app.events(SseOpts::after(0)).await;
    let reference = read_to(&mut full, "ev-19").await;
    drop(full);
    let cursors: Vec<u64> = reference.iter().map(SseEvent::cursor).collect();
    assert!(
        cursors.windows(2).all(|w| w[0] < w[1]),
        "cursors must strictly increase:\n{}",
        dump_events(&reference)
    );
    for e in &reference {
        assert_eq!(
            e.json()["id"],
            json!(e.cursor()),
            "data.id = id: line: {}",
            e.short()
        );
        assert_eq!(
            e.json()["type"],
            e.kind().as_str(),
            "data.type = event: line: {}",
            e.short()
        );
    }
    assert_eq!(
        summary(&first),
        summary(
            &reference
                .iter()
                .filter(|e| e.cursor() <= n)
                .cloned()
                .collect::<Vec<_>>()
        ),
        "the first read and the reference disagree"
    );

    // Last-Event-ID: N and ?after=N → exactly the events after N, then live ones.
    let mut by_header = app.events(SseOpts::last_event_id(n)).await;
    let got = read_to(&mut by_header, "ev-19").await;
    assert_suffix("Last-Event-ID", &got, &reference, n);
    let mut by_query = app.events(SseOpts::after(n)).await;
    let got = read_to(&mut by_query, "ev-19").await;
    assert_suffix("?after", &got, &reference, n);
    // Both keep delivering live events.
    post_n(&app, &sid, 20..21).await;
    let live_h = read_to(&mut by_header, "ev-20").await;
    let live_q = read_to(&mut by_query, "ev-20").await;
    assert_eq!(summary(&live_h), summary(&live_q));
    assert!(live_h
        .iter()
        .all(|e| e.cursor() > cursors[cursors.len() - 1]));
    drop(by_header);
    drop(by_query);
    let last_before_restart = live_h.last().unwrap().cursor();

    // Across a graceful restart…
    app.restart().await;
    post_n(&app, &sid, 21..25).await;
    let mut full = app.events(SseOpts::after(0)).await;
    let reference2 = read_to(&mut full, "ev-24").await;
    drop(full);
    assert_eq!(
        summary(
            &reference2
                .iter()
                .filter(|e| e.cursor() <= cursors[cursors.len() - 1])
                .cloned()
                .collect::<Vec<_>>()
        ),
        summary(&reference),
        "the event log before the restart changed"
    );
    let after_restart: Vec<u64> = reference2
        .iter()
        .filter(|e| e.cursor() > last_before_restart)
        .map(SseEvent::cursor)
        .collect();
    assert!(!after_restart.is_empty(), "no events after the restart");
    let mut by_header = app.events(SseOpts::last_event_id(n)).await;
    let got = read_to(&mut by_header, "ev-24").await;
    assert_suffix("Last-Event-ID after restart", &got, &reference2, n);
    let mut by_query = app.events(SseOpts::after(last_before_restart)).await;
    let got = read_to(&mut by_query, "ev-24").await;
    assert_suffix(
        "?after after restart",
        &got,
        &reference2,
        last_before_restart,
    );
    drop(by_header);
    drop(by_query);

    // …and across a SIGKILL.
    let last = reference2.last().unwrap().cursor();
    app.kill9_and_restart().await;
    post_n(&app, &sid, 25..27).await;
    let mut full = app.events(SseOpts::after(0)).await;
    let reference3 = read_to(&mut full, "ev-26").await;
    assert_eq!(
        summary(
            &reference3
                .iter()
                .filter(|e| e.cursor() <= last)
                .cloned()
                .collect::<Vec<_>>()
        ),
        summary(&reference2),
        "the event log changed across SIGKILL"
    );
    let mut by_header = app.events(SseOpts::last_event_id(last)).await;
    let got = read_to(&mut by_header, "ev-26").await;
    assert_suffix("Last-Event-ID after SIGKILL", &got, &reference3, last);
    let texts_now = texts(&app.messages(&sid).await);
    let expected: Vec<String> = (0..27).map(|i| format!("event test {i}")).collect();
    assert_eq!(texts_now, expected);
}

/// The dedupe index a restart loads holds the keys of every stored row (read alone, without
/// the texts): a retry of an early callback (same `message_id`) and an early content duplicate
/// (a new `message_id`, the same text in the same scope) are refused, before and after `kill -9`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn early_retries_and_re_sends_are_refused_across_a_kill_9() {
    const MESSAGES: usize = 400;
    let mut app = App::start().await;
    let sid = app.create_chat().await;
    let task = new_id();
    let body = |n: usize, id: &str| {
        with(
            message(&sid, &task, id, &format!("Reply number {n}.")),
            json!({"user_message_id": format!("um-{n}")}),
        )
    };
    let cb = app.cb();
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(SENDERS * 8) {
        let posts = chunk.iter().map(|&n| {
            let (cb, b) = (cb.clone(), body(n, &format!("m-{n}")));
            async move { cb.post(&b).await }
        });
        for r in futures_util::future::join_all(posts).await {
            assert_applied(&r);
        }
    }
    let check = |app: &App| {
        let cb = app.cb();
        let early = [body(3, "m-3"), body(7, "again-7"), body(40, "m-40")];
        async move {
            for b in early {
                let r = cb.post(&b).await;
                assert_eq!(r.status, 200, "{r}");
                assert!(r.is_duplicate(), "an early duplicate was accepted: {r}");
            }
        }
    };
    check(&app).await;
    app.kill9_and_restart().await;
    check(&app).await;
    // A new message is still new, once.
    let r = app.post(&body(MESSAGES, "m-new")).await;
    assert_applied(&r);
    assert!(app.post(&body(MESSAGES, "m-new")).await.is_duplicate());
    let rows = app.messages(&sid).await;
    assert_eq!(rows.len(), MESSAGES + 1);
    let texts: HashSet<&str> = rows.iter().filter_map(|m| m["text"].as_str()).collect();
    assert_eq!(texts.len(), MESSAGES + 1, "a text is shown twice");
}
