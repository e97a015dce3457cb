//! Replays every recorded Hermes callback sequence (`tests/fixtures/recordings/hermes-*.jsonl`,
//! described in `tests/fixtures/README.md`) against the binary, in recorded order and without
//! real-time waits, and checks the conversation each one must end with.
//!
//! The recorded `answered` codes are what the *capturing* receiver replied (some deliberately
//! 500/401/slow to provoke retries); our binary is healthy, so every callback is replayed and
//! must be accepted. The expected outcomes below are written out by hand from the rules of
//! docs/contract.md; line numbers are the file's own (line 1 is the scenario header).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use common::*;
use serde_json::Value;

fn recordings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join("recordings")
}

struct Line {
    no: usize,
    path: String,
    answered: u64,
    body: Value,
}

fn load(file: &str) -> (Value, Vec<Line>) {
    let path = recordings_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read recording {}: {e}", path.display()));
    let mut lines = text.lines().enumerate();
    let (_, head) = lines.next().expect("empty recording");
    let header: Value = serde_json::from_str(head).expect("header line is JSON");
    let lines = lines
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{file}:{}: not JSON: {e}", i + 1));
            Line {
                no: i + 1,
                path: v["path"].as_str().expect("path").to_owned(),
                answered: v["answered"].as_u64().unwrap_or(0),
                body: v["body"].clone(),
            }
        })
        .collect();
    (header, lines)
}

/// A check made right after the callback of a given line was answered.
enum Check {
    /// The typing scopes shown for the chat session (sorted).
    Typing(Vec<String>),
    /// Every listed chat entry (drafts included), text with trailing whitespace trimmed.
    Listed(Vec<String>),
    /// Exactly one chat draft, with this text (trailing whitespace trimmed). A later `Draft`
    /// check must see the same entry (same `id`) growing.
    Draft(String),
    /// The chat message with this exact text is no draft and is the entry of the draft seen.
    SettledDraft(String),
    /// Every listed insight (drafts included), newest first.
    Insights(Vec<String>),
}

struct Scenario {
    /// The final chat, in order: exact texts after the clean-up.
    chat: Vec<String>,
    /// The final insights list (newest first).
    insights: Vec<String>,
    /// Lines whose `message` must be answered `duplicate` (every other `message` line must be
    /// applied).
    duplicates: Vec<usize>,
    checks: Vec<(usize, Check)>,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn typing_is(scopes: &[&str]) -> Check {
    Check::Typing(s(scopes))
}

const SKILLS: &str = "📚 skills_list...";
const HOME_CHANNEL: &str = "📬 No home channel is set for Stagewhisper. A home channel is where Hermes delivers cron job results and cross-platform messages.\n\nType /sethome to make this chat your home channel, or ignore to skip.";

fn long_reply(upto: usize) -> String {
    (1..=upto)
        .map(|i| format!("Sentence {i} of a long stub reply."))
        .collect::<Vec<_>>()
        .join(" ")
}

fn scenario(file: &'static str) -> Scenario {
    let mut sc = Scenario {
        chat: vec![],
        insights: vec![],
        duplicates: vec![],
        checks: vec![],
    };
    match file {
        "hermes-default-cb_401_message.jsonl" => {
            // L5 is the plain-text re-send of L4 (other message_id): a near-identical duplicate.
            sc.chat = s(&["Stub reply #33: hello with 401 receiver"]);
            sc.duplicates = vec![5];
            sc.checks = vec![
                (3, typing_is(&["um-cb_401_message"])),
                (4, typing_is(&[])),
                (
                    5,
                    Check::Listed(s(&["Stub reply #33: hello with 401 receiver"])),
                ),
                (6, typing_is(&["um-cb_401_message"])),
            ];
        }
        "hermes-default-cb_500_always.jsonl" => {
            // L4 applied; L5/6/8 retries of the same message_id; L9 the plain-text re-send;
            // L10/11/13 its retries.
            sc.chat = s(&["Stub reply #31: hello with broken receiver"]);
            sc.duplicates = vec![5, 6, 8, 9, 10, 11, 13];
            sc.checks = vec![
                (3, typing_is(&["um-cb_500_always"])),
                (4, typing_is(&[])),
                (7, typing_is(&["um-cb_500_always"])),
                (
                    9,
                    Check::Listed(s(&["Stub reply #31: hello with broken receiver"])),
                ),
            ];
        }
        "hermes-default-cb_500_then_ok.jsonl" => {
            sc.chat = s(&["Stub reply #27: hello with flaky receiver"]);
            sc.duplicates = vec![5, 7];
        }
        "hermes-default-cb_500_typing.jsonl" => {
            sc.chat = s(&["Stub reply #25: hello with typing-hostile receiver"]);
            sc.checks = vec![(3, typing_is(&["um-cb_500_typing"])), (4, typing_is(&[]))];
        }
        "hermes-default-cb_slow_receiver.jsonl" => {
            sc.chat = s(&["Stub reply #29: hello with slow receiver"]);
            sc.duplicates = vec![8, 11];
            sc.checks = vec![
                (4, typing_is(&[])),
                (7, typing_is(&["um-cb_slow_receiver"])),
            ];
        }
        "hermes-default-chat_empty_reply.jsonl" => {
            sc.chat = s(&[
                "⚠️ Empty response from model — retrying (1/3)",
                "⚠️ Empty response from model — retrying (2/3)",
                "⚠️ Empty response from model — retrying (3/3)",
                "❌ Model returned no content after all retries. No fallback providers configured.",
                "⚠️ No reply: the model returned empty content after retries and any fallback providers. Try `continue`, switch model/provider, or inspect the tool output above.",
            ]);
        }
        "hermes-default-chat_llm_500.jsonl" => {
            // L8: the same failure text again under another message_id.
            sc.chat = s(&["⚠️ The model provider failed after retries. I kept raw provider details out of chat; check gateway logs for diagnostics."]);
            sc.duplicates = vec![8];
            sc.checks = vec![(6, typing_is(&["um-chat_llm_500"]))];
        }
        "hermes-default-chat_slow_tool.jsonl" => {
            // `completed` (L7) before the real reply, typing after it (L8), the reply with a new
            // task_id (L9).
            sc.chat = s(&[SKILLS, "Stub reply #23: tool result received"]);
            sc.checks = vec![
                (7, typing_is(&[])),
                (8, typing_is(&["um-chat_slow_tool"])),
                (9, typing_is(&[])),
            ];
        }
        "hermes-default-chat_tool_call.jsonl" => {
            // The streamed part (L5–L9) repeats the tool note already shown (L4): a draft that
            // is a prefix of a shown message is not shown; L10 settles it with the final text.
            sc.chat = s(&[SKILLS, "Stub reply #9: tool result received"]);
            sc.checks = vec![
                (8, Check::Listed(s(&[SKILLS]))),
                (9, Check::Listed(s(&[SKILLS]))),
                (
                    10,
                    Check::Listed(s(&[SKILLS, "Stub reply #9: tool result received"])),
                ),
            ];
        }
        "hermes-default-prelude_chat_dedupe.jsonl" => {
            sc.chat = s(&["Stub reply #2: What should I ask next?"]);
            sc.checks = vec![(7, typing_is(&["um-chat-1"])), (8, typing_is(&[]))];
        }
        "hermes-default-rapid_second_message.jsonl" => {
            sc.chat = s(&[
                "Stub reply #38: #slow first question about pricing",
                "Stub reply #40: second question about timeline",
            ]);
            sc.checks = vec![
                (5, typing_is(&["um-rapid-1"])),
                (7, typing_is(&[])),
                (9, typing_is(&["um-rapid-2"])),
                (11, typing_is(&[])),
            ];
        }
        "hermes-default-transcript_final_insights.jsonl" => {
            sc.insights = s(&["Stub reply #4: They said the budget is fifty thousand for Q3."]);
        }
        "hermes-default-transcript_final_plain.jsonl" => {
            // No user_message_id: the typing scope is the task.
            sc.chat = s(&["Stub reply #6: They said the budget is fifty thousand for Q3."]);
            sc.checks = vec![
                (2, typing_is(&["c621d3dc-94ae-4a1a-bc28-80329d44a7c2"])),
                (3, typing_is(&[])),
            ];
        }
        "hermes-fresh-fresh_first_chat.jsonl" => {
            sc.chat = s(&[HOME_CHANNEL, "Stub reply #2: hello from a fresh install"]);
            sc.checks = vec![
                (6, typing_is(&[])),
                (7, typing_is(&["um-fresh_first_chat"])),
                (8, typing_is(&[])),
            ];
        }
        "hermes-fresh-shutdown_midturn.jsonl" => {
            sc.chat = s(&[
                HOME_CHANNEL,
                SKILLS,
                "⚠️ Gateway shutting down — Your current task will be interrupted.",
            ]);
        }
        "hermes-streaming-stream_long.jsonl" => {
            // ~290 deltas build one draft; the final message (L304) settles it; the last delta
            // (L305) arrives after it and is ignored.
            sc.chat = vec![long_reply(45)];
            sc.checks = vec![
                (
                    303,
                    Check::Draft(format!("{} Sentence 45 of a long stub", long_reply(44))),
                ),
                (304, Check::SettledDraft(long_reply(45))),
                (305, Check::Listed(vec![long_reply(45)])),
                (307, Check::Listed(vec![long_reply(45)])),
            ];
        }
        "hermes-streaming-stream_slow.jsonl" => {
            // The final message (L11) arrives before the last text-delta (L12).
            sc.chat = s(&["Stub reply #4: #slow answer slowly please"]);
            sc.checks = vec![
                (7, Check::Draft("Stub".into())),
                (
                    10,
                    Check::Draft("Stub reply #4: #slow answer slowly".into()),
                ),
                (
                    11,
                    Check::SettledDraft("Stub reply #4: #slow answer slowly please".into()),
                ),
                (
                    12,
                    Check::Listed(s(&["Stub reply #4: #slow answer slowly please"])),
                ),
                (
                    14,
                    Check::Listed(s(&["Stub reply #4: #slow answer slowly please"])),
                ),
            ];
        }
        "hermes-streaming-stream_slow_tool.jsonl" => {
            // Edit-style drafts (cursor ▉), each under a new task_id and message_id, grow one
            // entry that L12 settles; L13 repeats the final text.
            sc.chat = s(&[SKILLS, "Stub reply #10: tool result received"]);
            sc.duplicates = vec![13];
            sc.checks = vec![
                (7, typing_is(&[])),
                (8, typing_is(&["um-stream_slow_tool"])),
                (9, Check::Draft("Stub".into())),
                (10, Check::Draft("Stub reply #10:".into())),
                (11, Check::Draft("Stub reply #10: tool result".into())),
                (
                    12,
                    Check::SettledDraft("Stub reply #10: tool result received".into()),
                ),
            ];
        }
        "hermes-streaming-stream_tool_call.jsonl" => {
            // The final message (L9) arrives before the last text-delta (L10).
            sc.chat = s(&[SKILLS, "Stub reply #7: tool result received"]);
            sc.checks = vec![
                (8, Check::Draft("Stub".into())),
                (
                    9,
                    Check::SettledDraft("Stub reply #7: tool result received".into()),
                ),
                (
                    10,
                    Check::Listed(s(&[SKILLS, "Stub reply #7: tool result received"])),
                ),
            ];
        }
        "hermes-streaming-stream_transcript_final_insights.jsonl" => {
            // Insights surface only the final message: a streamed insight could still turn out
            // to be a hidden `none`, so no draft is listed (or announced) while it streams.
            sc.insights = s(&["Stub reply #12: They said the budget is fifty thousand for Q3."]);
            sc.checks = vec![
                (11, Check::Insights(vec![])),
                (
                    12,
                    Check::Insights(s(&[
                        "Stub reply #12: They said the budget is fifty thousand for Q3.",
                    ])),
                ),
                (
                    15,
                    Check::Insights(s(&[
                        "Stub reply #12: They said the budget is fifty thousand for Q3.",
                    ])),
                ),
            ];
        }
        other => panic!("no expectation written for recording {other}"),
    }
    sc
}

/// Every recording must have an expectation here.
const ALL: &[&str] = &[
    "hermes-default-cb_401_message.jsonl",
    "hermes-default-cb_500_always.jsonl",
    "hermes-default-cb_500_then_ok.jsonl",
    "hermes-default-cb_500_typing.jsonl",
    "hermes-default-cb_slow_receiver.jsonl",
    "hermes-default-chat_empty_reply.jsonl",
    "hermes-default-chat_llm_500.jsonl",
    "hermes-default-chat_slow_tool.jsonl",
    "hermes-default-chat_tool_call.jsonl",
    "hermes-default-prelude_chat_dedupe.jsonl",
    "hermes-default-rapid_second_message.jsonl",
    "hermes-default-transcript_final_insights.jsonl",
    "hermes-default-transcript_final_plain.jsonl",
    "hermes-fresh-fresh_first_chat.jsonl",
    "hermes-fresh-shutdown_midturn.jsonl",
    "hermes-streaming-stream_long.jsonl",
    "hermes-streaming-stream_slow.jsonl",
    "hermes-streaming-stream_slow_tool.jsonl",
    "hermes-streaming-stream_tool_call.jsonl",
    "hermes-streaming-stream_transcript_final_insights.jsonl",
];

#[test]
fn every_recording_has_an_expectation() {
    let dir = recordings_dir();
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // The folder also holds other peers' traffic (not callback sequences).
        .filter(|n| n.starts_with("hermes-") && n.ends_with(".jsonl"))
        .collect();
    found.sort();
    let mut listed: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "recordings on disk vs. expectations in this file"
    );
    for f in ALL {
        let sc = scenario(f);
        let (header, lines) = load(f);
        assert!(header["scenario"].is_string(), "{f}: header {header}");
        assert!(!lines.is_empty(), "{f}: no callbacks");
        for (no, _) in &sc.checks {
            assert!(
                lines.iter().any(|l| l.no == *no),
                "{f}: check on missing line {no}"
            );
        }
        for no in &sc.duplicates {
            let l = lines
                .iter()
                .find(|l| l.no == *no)
                .expect("duplicate line exists");
            assert_eq!(l.body["status"], "message", "{f}:{no} is not a message");
        }
    }
}

/// Session ids of a recording → sessions created through the control API.
struct Sessions {
    map: BTreeMap<String, String>,
    chat: String,
}

async fn create_sessions(app: &App, file: &str, lines: &[Line]) -> Sessions {
    let mut bases = BTreeSet::new();
    let mut with_insights = BTreeSet::new();
    for l in lines {
        let sid = l.body["session_id"]
            .as_str()
            .expect("session_id")
            .to_owned();
        match sid.strip_prefix("insights:") {
            Some(base) => {
                bases.insert(base.to_owned());
                with_insights.insert(base.to_owned());
            }
            None => {
                bases.insert(sid);
            }
        }
    }
    assert_eq!(
        bases.len(),
        1,
        "{file}: expected one conversation, got {bases:?}"
    );
    let mut map = BTreeMap::new();
    let mut chat = String::new();
    for base in bases {
        if with_insights.contains(&base) {
            let (sid, isid) = app.create_call().await;
            map.insert(format!("insights:{base}"), isid);
            map.insert(base, sid.clone());
            chat = sid;
        } else {
            let sid = app.create_chat().await;
            map.insert(base, sid.clone());
            chat = sid;
        }
    }
    Sessions { map, chat }
}

fn rewrite(body: &Value, sessions: &Sessions) -> Value {
    let mut b = body.clone();
    let sid = b["session_id"].as_str().expect("session_id").to_owned();
    b["session_id"] = Value::String(sessions.map[&sid].clone());
    if let Some(chat_id) = b["chat_id"].as_str() {
        let mut c = chat_id.to_owned();
        for (from, to) in &sessions.map {
            c = c.replace(&format!(":{from}:"), &format!(":{to}:"));
        }
        b["chat_id"] = Value::String(c);
    }
    b
}

fn trimmed(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|m| text_of(m).trim_end().to_owned())
        .collect()
}

async fn replay(file: &'static str) {
    let sc = scenario(file);
    let (header, lines) = load(file);
    let name = header["scenario"].as_str().unwrap_or(file).to_owned();
    let mut app = App::start().await;
    let sessions = create_sessions(&app, file, &lines).await;
    let chat = sessions.chat.clone();
    let cb = app.cb();
    let mut draft_id: Option<Value> = None;

    for l in &lines {
        let body = rewrite(&l.body, &sessions);
        let task = l
            .path
            .strip_prefix("/tasks/")
            .expect("recorded path /tasks/{id}");
        let r = cb.post_to(task, &body).await;
        let at = format!(
            "{name} line {} ({} {}, recorded answer {})",
            l.no, body["status"], task, l.answered
        );
        if r.status != 200 || r.json["ok"] != true || r.json["reason"] == "session_ended" {
            panic!("{at}: expected 200 ok, got {r}\n{}", app.dump(&chat).await);
        }
        if body["status"] == "message" {
            let want_dup = sc.duplicates.contains(&l.no);
            if want_dup != r.is_duplicate() {
                panic!(
                    "{at}: expected {}, got {r}\n{}",
                    if want_dup {
                        "duplicate"
                    } else {
                        "applied (not duplicate)"
                    },
                    app.dump(&chat).await
                );
            }
        }
        for (_, check) in sc.checks.iter().filter(|(no, _)| *no == l.no) {
            run_check(&app, &at, &chat, check, &mut draft_id).await;
        }
    }

    // The final conversation.
    let msgs = app.messages(&chat).await;
    let ins = app.insights(&chat).await;
    let dump = app.dump(&chat).await;
    assert_eq!(texts(&msgs), sc.chat, "{name}: final chat\n{dump}");
    assert!(drafts(&msgs).is_empty(), "{name}: drafts left\n{dump}");
    assert!(
        drafts(&ins).is_empty(),
        "{name}: insight drafts left\n{dump}"
    );
    for m in &msgs {
        assert_eq!(m["kind"], "assistant", "{name}: kind\n{dump}");
        assert_eq!(m["session_id"], chat.as_str(), "{name}: session_id\n{dump}");
    }
    let ids: BTreeSet<String> = msgs.iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(ids.len(), msgs.len(), "{name}: duplicate ids\n{dump}");
    let mids: Vec<&str> = msgs
        .iter()
        .filter_map(|m| m["message_id"].as_str())
        .collect();
    let unique: BTreeSet<&&str> = mids.iter().collect();
    assert_eq!(
        unique.len(),
        mids.len(),
        "{name}: duplicate message_ids\n{dump}"
    );
    assert_eq!(texts(&ins), sc.insights, "{name}: final insights\n{dump}");
    assert_eq!(
        app.typing(&chat).await,
        Vec::<Value>::new(),
        "{name}: typing left\n{dump}"
    );

    // Durable as shown: identical after a graceful restart…
    app.restart().await;
    let msgs2 = app.messages(&chat).await;
    let ins2 = app.insights(&chat).await;
    assert_eq!(
        msgs2,
        msgs,
        "{name}: chat changed across a restart\n{}",
        app.dump(&chat).await
    );
    assert_eq!(
        ins2,
        ins,
        "{name}: insights changed across a restart\n{}",
        app.dump(&chat).await
    );
    // …and every message re-sent (an assistant retrying) is a duplicate that changes nothing.
    let cb = app.cb();
    for l in lines.iter().filter(|l| l.body["status"] == "message") {
        let body = rewrite(&l.body, &sessions);
        let task = l.path.strip_prefix("/tasks/").unwrap();
        let r = cb.post_to(task, &body).await;
        if !(r.status == 200 && r.is_duplicate()) {
            panic!(
                "{name} line {}: re-sent after restart, expected duplicate, got {r}\n{}",
                l.no,
                app.dump(&chat).await
            );
        }
    }
    assert_eq!(
        app.messages(&chat).await,
        msgs,
        "{name}: re-sends changed the chat"
    );
    assert_eq!(
        app.insights(&chat).await,
        ins,
        "{name}: re-sends changed the insights"
    );
}

async fn run_check(app: &App, at: &str, chat: &str, check: &Check, draft_id: &mut Option<Value>) {
    match check {
        Check::Typing(want) => {
            let mut scopes: Vec<String> = app
                .typing(chat)
                .await
                .iter()
                .map(|t| t["scope"].as_str().unwrap_or("?").to_owned())
                .collect();
            scopes.sort();
            if &scopes != want {
                panic!(
                    "{at}: typing scopes {scopes:?}, expected {want:?}\n{}",
                    app.dump(chat).await
                );
            }
        }
        Check::Listed(want) => {
            let msgs = app.messages(chat).await;
            if &trimmed(&msgs) != want {
                panic!(
                    "{at}: listed {:?}, expected {want:?}\n{}",
                    trimmed(&msgs),
                    app.dump(chat).await
                );
            }
        }
        Check::Draft(want) => {
            let msgs = app.messages(chat).await;
            let d = drafts(&msgs);
            if d.len() != 1 || text_of(d[0]).trim_end() != want {
                panic!(
                    "{at}: expected one draft {want:?}\n{}",
                    app.dump(chat).await
                );
            }
            if let Some(prev) = draft_id {
                if &d[0]["id"] != prev {
                    panic!(
                        "{at}: the draft moved (id {prev} → {}); it must grow in place\n{}",
                        d[0]["id"],
                        app.dump(chat).await
                    );
                }
            }
            *draft_id = Some(d[0]["id"].clone());
        }
        Check::SettledDraft(want) => {
            let msgs = app.messages(chat).await;
            let m = msgs.iter().find(|m| &text_of(m) == want);
            let ok = m.is_some_and(|m| m["draft"] == false && Some(&m["id"]) == draft_id.as_ref());
            if !ok {
                panic!(
                    "{at}: expected the draft #{:?} settled in place as {want:?}\n{}",
                    draft_id,
                    app.dump(chat).await
                );
            }
        }
        Check::Insights(want) => {
            let ins = app.insights(chat).await;
            if &texts(&ins) != want {
                panic!(
                    "{at}: insights {:?}, expected {want:?}\n{}",
                    texts(&ins),
                    app.dump(chat).await
                );
            }
        }
    }
}

macro_rules! replay_tests {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                replay($file).await;
            }
        )*
    };
}

replay_tests! {
    cb_401_message => "hermes-default-cb_401_message.jsonl",
    cb_500_always => "hermes-default-cb_500_always.jsonl",
    cb_500_then_ok => "hermes-default-cb_500_then_ok.jsonl",
    cb_500_typing => "hermes-default-cb_500_typing.jsonl",
    cb_slow_receiver => "hermes-default-cb_slow_receiver.jsonl",
    chat_empty_reply => "hermes-default-chat_empty_reply.jsonl",
    chat_llm_500 => "hermes-default-chat_llm_500.jsonl",
    chat_slow_tool => "hermes-default-chat_slow_tool.jsonl",
    chat_tool_call => "hermes-default-chat_tool_call.jsonl",
    prelude_chat_dedupe => "hermes-default-prelude_chat_dedupe.jsonl",
    rapid_second_message => "hermes-default-rapid_second_message.jsonl",
    transcript_final_insights => "hermes-default-transcript_final_insights.jsonl",
    transcript_final_plain => "hermes-default-transcript_final_plain.jsonl",
    fresh_first_chat => "hermes-fresh-fresh_first_chat.jsonl",
    shutdown_midturn => "hermes-fresh-shutdown_midturn.jsonl",
    stream_long => "hermes-streaming-stream_long.jsonl",
    stream_slow => "hermes-streaming-stream_slow.jsonl",
    stream_slow_tool => "hermes-streaming-stream_slow_tool.jsonl",
    stream_tool_call => "hermes-streaming-stream_tool_call.jsonl",
    stream_transcript_final_insights => "hermes-streaming-stream_transcript_final_insights.jsonl",
}
