//! Search, paging and export, black-box: the real `stagewhisper-headless` binary on a temp data
//! dir (a real SQLite file), driven over real HTTP on loopback, restarted, and the real
//! `export` subcommand reading the same data dir while the app runs and after it stopped.

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// `GET /api/search?q=…` (the query percent-encoded).
async fn search(app: &App, q: &str, extra: &str) -> Resp {
    let q: String = url_encode(q);
    app.ui().get(&format!("/api/search?q={q}{extra}")).await
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn results(r: &Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{r}");
    r.json["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results array: {r}"))
        .clone()
}

/// (session, kind, message id) of each result.
fn found(r: &Resp) -> BTreeSet<(String, String, i64)> {
    results(r)
        .iter()
        .map(|h| {
            (
                h["session_id"].as_str().unwrap().to_string(),
                h["kind"].as_str().unwrap().to_string(),
                h["message_id"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Every highlight of every result spells `word` (case-insensitively).
#[track_caller]
fn assert_highlights(r: &Resp, word: &str) {
    for h in results(r) {
        let chars: Vec<char> = h["snippet"].as_str().unwrap().chars().collect();
        let marks = h["highlights"].as_array().unwrap();
        assert!(!marks.is_empty(), "no highlight: {h}");
        for m in marks {
            let (a, b) = (
                m[0].as_u64().unwrap() as usize,
                m[1].as_u64().unwrap() as usize,
            );
            let hit: String = chars[a..b].iter().collect();
            assert!(
                hit.to_lowercase().starts_with(word),
                "highlight {hit:?} in {h}"
            );
        }
    }
}

async fn transcript_turn(app: &App, sid: &str, speaker: &str, text: &str) -> i64 {
    let r = app
        .ui()
        .post(
            &format!("/api/calls/{sid}/transcript"),
            &json!({"speaker": speaker, "text": text}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    r.json["id"].as_i64().unwrap()
}

async fn user_message(app: &App, sid: &str, text: &str) -> i64 {
    let r = app
        .ui()
        .post(
            &format!("/api/sessions/{sid}/messages"),
            &json!({"text": text}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    r.json["id"].as_i64().unwrap()
}

async fn assistant(app: &App, session: &str, text: &str) {
    let r = app
        .post(&message(session, &new_id(), &new_id(), text))
        .await;
    assert_applied(&r);
}

/// The id of the one entry of `list` whose text is `text`.
fn id_of(list: &[Value], text: &str) -> i64 {
    let m: Vec<&Value> = list.iter().filter(|m| m["text"] == text).collect();
    assert_eq!(m.len(), 1, "{text:?} in {list:?}");
    m[0]["id"].as_i64().unwrap()
}

#[tokio::test]
async fn search_finds_chat_insights_and_transcript_across_calls_restarts_and_deletes() {
    let mut app = App::start().await;
    let (a, a_insights) = app.create_call().await;
    let (b, b_insights) = app.create_call().await;

    let a_user = user_message(&app, &a, "Can we afford the Zanzibar offsite?").await;
    assistant(
        &app,
        &a,
        "The zanzibar budget fits if travel stays under 4k.",
    )
    .await;
    assistant(
        &app,
        &a_insights,
        "Ask about Zanzibar dates before pricing.",
    )
    .await;
    let a_turn = transcript_turn(&app, &a, "Alice", "We loved zanzibar last spring").await;
    assistant(&app, &a, "Unrelated reply about quarterly numbers.").await;
    let b_turn = transcript_turn(&app, &b, "Bob", "Zanzibar again, really?").await;
    assistant(
        &app,
        &b_insights,
        "They push back on ZANZIBAR: offer options.",
    )
    .await;

    let a_chat = app.messages(&a).await;
    let a_ins = app.insights(&a).await;
    let b_ins = app.insights(&b).await;
    let want: BTreeSet<(String, String, i64)> = [
        (a.clone(), "chat", a_user),
        (
            a.clone(),
            "chat",
            id_of(
                &a_chat,
                "The zanzibar budget fits if travel stays under 4k.",
            ),
        ),
        (
            a.clone(),
            "insight",
            id_of(&a_ins, "Ask about Zanzibar dates before pricing."),
        ),
        (a.clone(), "transcript", a_turn),
        (b.clone(), "transcript", b_turn),
        (
            b.clone(),
            "insight",
            id_of(&b_ins, "They push back on ZANZIBAR: offer options."),
        ),
    ]
    .into_iter()
    .map(|(s, k, id)| (s, k.to_string(), id))
    .collect();

    let r = search(&app, "zanzibar", "").await;
    assert_eq!(found(&r), want, "{r}");
    assert_highlights(&r, "zanzibar");
    // Newest first, each with its session's title and a time.
    let ids: Vec<i64> = results(&r)
        .iter()
        .map(|h| h["message_id"].as_i64().unwrap())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable_by(|x, y| y.cmp(x));
    assert_eq!(ids, sorted, "{r}");
    for h in results(&r) {
        assert_eq!(h["title"], "test call", "{h}");
        assert!(h["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{h}");
    }
    let user_hit = results(&r)
        .into_iter()
        .find(|h| h["message_id"] == a_user)
        .unwrap();
    assert_eq!(user_hit["role"], "user", "{user_hit}");

    // All words are required; the last is a prefix too; case and accents do not matter.
    assert_eq!(
        found(&search(&app, "zanzibar budget", "").await),
        [(
            a.clone(),
            "chat".to_string(),
            id_of(
                &a_chat,
                "The zanzibar budget fits if travel stays under 4k."
            )
        )]
        .into_iter()
        .collect()
    );
    assert_eq!(found(&search(&app, "Zanzi", "").await), want);
    assert_eq!(results(&search(&app, "quokka", "").await).len(), 0);
    assert_eq!(
        results(&search(&app, "zanzibar", "&limit=2").await).len(),
        2
    );

    // Query syntax is only text: no 500 for what FTS5 would call a syntax error.
    for q in [
        "zanzibar\"",
        "NEAR(zanzibar",
        "zanzibar OR",
        "\"unbalanced",
        "a:b",
        "*zanzibar*",
        "-zanzibar",
    ] {
        let r = search(&app, q, "").await;
        assert_eq!(r.status, 200, "{q:?}: {r}");
    }
    for (q, extra, code) in [
        ("", "", "empty_query"),
        ("  \"*():- ", "", "empty_query"),
        (&"word ".repeat(17), "", "query_too_long"),
        ("zanzibar", "&limit=0", "invalid_limit"),
        ("zanzibar", "&limit=101", "invalid_limit"),
        ("zanzibar", "&limit=ten", "invalid_limit"),
    ] {
        assert_error(&search(&app, q, extra).await, 400, code);
    }
    assert_error(&app.ui().get("/api/search").await, 400, "empty_query");

    // Across a restart: the same results from the file.
    app.restart().await;
    let r = search(&app, "zanzibar", "").await;
    assert_eq!(found(&r), want, "after restart: {r}");

    // A deleted session leaves the index with its rows.
    let r = app.delete_session(&a).await;
    assert_eq!(r.status, 200, "{r}");
    let only_b: BTreeSet<_> = want.iter().filter(|(s, _, _)| *s == b).cloned().collect();
    assert_eq!(found(&search(&app, "zanzibar", "").await), only_b);
    app.restart().await;
    assert_eq!(found(&search(&app, "zanzibar", "").await), only_b);
    // And what is written after the restart is found at once.
    let later = transcript_turn(&app, &b, "Bob", "Fine, Zanzibar it is").await;
    let r = search(&app, "zanzibar", "&limit=1").await;
    assert_eq!(results(&r)[0]["message_id"], later, "{r}");
    let status = app.sigterm().await;
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn messages_page_newest_first_and_the_whole_list_stays_as_it_was() {
    let app = App::start().await;
    let sid = app.create_chat().await;
    let other = app.create_chat().await;
    for n in 0..230 {
        if n % 2 == 0 {
            user_message(&app, &sid, &format!("question {n}")).await;
        } else {
            assistant(&app, &sid, &format!("answer {n}")).await;
        }
    }
    let other_id = user_message(&app, &other, "elsewhere").await;
    let all = app.messages(&sid).await;
    assert_eq!(all.len(), 230);

    // Newest page first, oldest first within a page, `next` the path of the older one.
    let mut pages: Vec<Vec<Value>> = Vec::new();
    let mut path = Some(format!("/api/sessions/{sid}/messages?limit=100"));
    while let Some(p) = path {
        let r = app.ui().get(&p).await;
        assert_eq!(r.status, 200, "{r}");
        pages.push(r.json["items"].as_array().unwrap().clone());
        path = r.json["next"].as_str().map(str::to_string);
        assert!(pages.len() <= 3, "{r}");
    }
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        [100, 100, 30]
    );
    let joined: Vec<Value> = pages.iter().rev().flatten().cloned().collect();
    assert_eq!(
        joined, all,
        "the pages are the list, nothing lost or repeated"
    );
    assert_eq!(pages[0].last(), all.last());

    // `before` alone takes the default page size; a page is the same as its slice.
    let pivot = all[150]["id"].as_i64().unwrap();
    let r = app
        .ui()
        .get(&format!(
            "/api/sessions/{sid}/messages?before={pivot}&limit=20"
        ))
        .await;
    assert_eq!(
        r.json["items"].as_array().unwrap()[..],
        all[130..150],
        "{r}"
    );
    let r = app
        .ui()
        .get(&format!("/api/sessions/{sid}/messages?before={pivot}"))
        .await;
    assert_eq!(r.json["items"].as_array().unwrap()[..], all[50..150], "{r}");

    for (q, status, code) in [
        ("limit=0", 400, "invalid_limit"),
        ("limit=501", 400, "invalid_limit"),
        ("limit=x", 400, "invalid_limit"),
        ("limit=10&before=abc", 400, "invalid_cursor"),
        (
            &format!("limit=10&before={other_id}"),
            400,
            "invalid_cursor",
        ),
        ("limit=10&before=999999999", 400, "invalid_cursor"),
    ] {
        let r = app
            .ui()
            .get(&format!("/api/sessions/{sid}/messages?{q}"))
            .await;
        assert_error(&r, status, code);
    }
    let r = app.ui().get("/api/sessions/nope/messages?limit=10").await;
    assert_error(&r, 404, "session_not_found");
}

/// Walks a list route's pages from the newest (`first`), following `next`; the pages in order.
async fn walk_pages(app: &App, first: &str) -> Vec<Vec<Value>> {
    let mut pages: Vec<Vec<Value>> = Vec::new();
    let mut path = Some(first.to_string());
    while let Some(p) = path {
        let r = app.ui().get(&p).await;
        assert_eq!(r.status, 200, "{p}: {r}");
        pages.push(r.json["items"].as_array().unwrap().clone());
        path = r.json["next"].as_str().map(str::to_string);
        assert!(pages.len() <= 10, "{r}");
    }
    pages
}

#[tokio::test]
async fn insights_and_transcript_pages_newest_first_and_the_whole_lists_stay_as_they_were() {
    let app = App::start().await;
    let (sid, isid) = app.create_call().await;
    let (other, _) = app.create_call().await;
    for n in 0..45 {
        assistant(&app, &isid, &format!("insight {n}")).await;
        transcript_turn(&app, &sid, "Alice", &format!("turn {n}")).await;
    }
    // A `none` reply is never listed, paged or not.
    assistant(&app, &isid, "none").await;
    let other_turn = transcript_turn(&app, &other, "Bob", "elsewhere").await;

    let all_ins = app.insights(&sid).await;
    assert_eq!(all_ins.len(), 45);
    assert_eq!(all_ins[0]["text"], "insight 44", "newest first");
    let r = app.ui().get(&format!("/api/calls/{sid}/transcript")).await;
    assert_eq!(r.status, 200, "{r}");
    let all_turns = r
        .json
        .as_array()
        .expect("the whole transcript is an array")
        .clone();
    assert_eq!(all_turns.len(), 45);
    assert_eq!(all_turns[0]["text"], "turn 0", "oldest first");

    // Insights: the newest page first, newest first within a page (as the whole list).
    let pages = walk_pages(&app, &format!("/api/sessions/{sid}/insights?limit=20")).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [20, 20, 5]);
    let joined: Vec<Value> = pages.iter().flatten().cloned().collect();
    assert_eq!(
        joined, all_ins,
        "the pages are the list, nothing lost or repeated"
    );

    // Transcript: the newest page first, oldest first within a page (as the whole list).
    let pages = walk_pages(&app, &format!("/api/calls/{sid}/transcript?limit=20")).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [20, 20, 5]);
    let joined: Vec<Value> = pages.iter().rev().flatten().cloned().collect();
    assert_eq!(
        joined, all_turns,
        "the pages are the list, nothing lost or repeated"
    );

    // `before` alone takes the default page size; a page is its slice of the whole list.
    let pivot = all_ins[10]["id"].as_i64().unwrap();
    let r = app
        .ui()
        .get(&format!(
            "/api/sessions/{sid}/insights?before={pivot}&limit=3"
        ))
        .await;
    assert_eq!(
        r.json["items"].as_array().unwrap()[..],
        all_ins[11..14],
        "{r}"
    );
    let r = app
        .ui()
        .get(&format!("/api/sessions/{sid}/insights?before={pivot}"))
        .await;
    assert_eq!(
        r.json["items"].as_array().unwrap()[..],
        all_ins[11..],
        "{r}"
    );
    assert_eq!(r.json["next"], Value::Null, "{r}");
    let pivot = all_turns[30]["id"].as_i64().unwrap();
    let r = app
        .ui()
        .get(&format!(
            "/api/calls/{sid}/transcript?before={pivot}&limit=4"
        ))
        .await;
    assert_eq!(
        r.json["items"].as_array().unwrap()[..],
        all_turns[26..30],
        "{r}"
    );

    // The same codes as the messages pages.
    let ins_of_other = other_turn; // a turn of another call is no entry of this one
    for base in [
        format!("/api/sessions/{sid}/insights"),
        format!("/api/calls/{sid}/transcript"),
    ] {
        for (q, code) in [
            ("limit=0".to_string(), "invalid_limit"),
            ("limit=501".to_string(), "invalid_limit"),
            ("limit=x".to_string(), "invalid_limit"),
            ("limit=10&before=abc".to_string(), "invalid_cursor"),
            (format!("limit=10&before={ins_of_other}"), "invalid_cursor"),
            ("limit=10&before=999999999".to_string(), "invalid_cursor"),
        ] {
            let r = app.ui().get(&format!("{base}?{q}")).await;
            assert_error(&r, 400, code);
        }
    }
    // Each list is its own: a turn is no cursor of the insights, an insight none of the turns.
    let (a_turn, an_insight) = (&all_turns[3]["id"], &all_ins[3]["id"]);
    let r = app
        .ui()
        .get(&format!(
            "/api/sessions/{sid}/insights?limit=5&before={a_turn}"
        ))
        .await;
    assert_error(&r, 400, "invalid_cursor");
    let r = app
        .ui()
        .get(&format!(
            "/api/calls/{sid}/transcript?limit=5&before={an_insight}"
        ))
        .await;
    assert_error(&r, 400, "invalid_cursor");
    let r = app.ui().get("/api/sessions/nope/insights?limit=10").await;
    assert_error(&r, 404, "session_not_found");
    let r = app.ui().get("/api/calls/nope/transcript?limit=10").await;
    assert_error(&r, 404, "session_not_found");
}

fn export_cli(app: &App, sid: &str, format: &str) -> std::process::Output {
    std::process::Command::new(bin())
        .args(["--data-dir", &app.data_dir.to_string_lossy()])
        .args(["export", "--session", sid, "--format", format])
        .output()
        .expect("run the export command")
}

#[tokio::test]
async fn export_from_the_api_and_the_command_are_the_same_bytes() {
    let mut app = App::start().await;
    let (sid, isid) = app.create_call().await;
    user_message(&app, &sid, "What should I ask next?").await;
    assistant(&app, &sid, "Ask about the **timeline**.").await;
    assistant(&app, &isid, "They hesitate on price.").await;
    transcript_turn(&app, &sid, "Alice", "We need it by March.").await;
    let r = app.end_call(&sid).await;
    assert_eq!(r.status, 200, "{r}");

    let json = app
        .ui()
        .get(&format!("/api/sessions/{sid}/export?format=json"))
        .await;
    assert_eq!(json.status, 200, "{json}");
    assert_eq!(
        json.header("content-type").as_deref(),
        Some("application/json")
    );
    let v = &json.json;
    assert_eq!(v["format"], "stagewhisper.export");
    assert_eq!(v["session"]["session_id"], sid.as_str());
    assert!(v["session"]["ended_at"].is_string(), "{v}");
    assert_eq!(v["transcript"][0]["speaker"], "Alice");
    assert_eq!(v["transcript"][0]["text"], "We need it by March.");
    assert_eq!(v["insights"][0]["text"], "They hesitate on price.");
    let kinds: Vec<&str> = v["chat"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "assistant"]);

    let md = app
        .ui()
        .get(&format!("/api/sessions/{sid}/export?format=md"))
        .await;
    assert_eq!(md.status, 200, "{md}");
    assert!(md
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/markdown")));
    assert!(md
        .header("content-disposition")
        .is_some_and(|c| c.contains("test-call.md")));
    for part in [
        "# test call",
        "## Transcript",
        "**Alice:** We need it by March.",
        "## Insights",
        "They hesitate on price.",
        "**You**",
        "Ask about the **timeline**.",
    ] {
        assert!(md.text.contains(part), "{part:?} in\n{}", md.text);
    }

    // The command reads the same file while the app runs, and after it stopped.
    for format in ["json", "md"] {
        let out = export_cli(&app, &sid, format);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = if format == "json" {
            &json.text
        } else {
            &md.text
        };
        assert_eq!(&String::from_utf8(out.stdout).unwrap(), want);
    }
    let status = app.sigterm().await;
    assert!(status.success());
    let out = export_cli(&app, &sid, "md");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), md.text);

    // Unknown session, unknown format: a clear refusal.
    let out = export_cli(&app, "no-such-session", "md");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such session"));
    app.restart().await;
    assert_error(
        &app.ui()
            .get(&format!("/api/sessions/{sid}/export?format=pdf"))
            .await,
        400,
        "invalid_format",
    );
    assert_error(
        &app.ui().get("/api/sessions/nope/export?format=md").await,
        404,
        "session_not_found",
    );
    let _ = isid;
}
