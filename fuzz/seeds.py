#!/usr/bin/env python3
"""(Re)generates the seed inputs of every fuzz target into corpus/<target>/ from the recorded
fixtures in tests/fixtures/ (what real peers sent) and a few hand-written inputs.

Seeds are named after a hash of their content, so running it again adds nothing twice; run
`./run.sh --cmin` afterwards to minimise the corpora (libFuzzer keeps what adds coverage).
"""

import hashlib
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures" / "recordings"
CORPUS = HERE / "corpus"
# Seeds larger than this are cut out (libFuzzer's default -max_len is 4096 bytes).
MAX = 4096

seeds = {}


def add(target, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) <= MAX:
        seeds.setdefault(target, set()).add(bytes(data))


def jsonl(path):
    for line in path.read_text().splitlines():
        if line.strip():
            yield json.loads(line)


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# --- callbacks and stream chunks: every body the Hermes adapter posted ---
bodies = []
for f in sorted(FIXTURES.glob("hermes-*.jsonl")):
    for rec in jsonl(f):
        if "body" in rec:
            bodies.append(rec["body"])
for b in bodies:
    add("callback", compact(b))
    add("callback", json.dumps(b, indent=1))
    if isinstance(b.get("chunk"), dict):
        add("stream_chunk", compact(b["chunk"]))
for raw in [
    "[]", "{", '"s"', "", '{"session_id":"s","status":"typing"} x',
    '{"session_id":"s","status":"message","reply_text":"a \\"q\\" \\u00e9\\n","meta":{"d":[1,{"x":null}]}}',
    '{"session_id":"s","status":"typing","occurred_at":1733050000000}',
    '{"session_id":"s","status":"notice","reply_text":"(Response formatting failed, plain text:)\\n\\nhi \\u2589"}',
    '{"session_id":"insights:s","status":"message","reply_text":"None.","occurred_at":"2026-11-29T12:35:28.1+02:00"}',
    '{"session_id":"s","status":"errored","error_code":"x","error_message":null,"label":" "}',
    '{"session_id":"s","status":"stream","chunk":{"type":"text-delta","id":"a","delta":"b"}}',
]:
    add("callback", raw)
for raw in [
    '{"type":"start"}', '{"type":"finish"}', '{"type":"text-start","id":"t1"}',
    '{"type":"text-delta","id":"t1","delta":"Hel"}', '{"type":"text-end","id":"t1"}',
    '{"type":"reasoning-delta","id":"r","delta":"x"}', '{"type":5}', "null", "[]",
]:
    add("stream_chunk", raw)

# --- transcripts: the replies of the recordings as cues, plus the awkward corners ---
texts = [b["reply_text"] for b in bodies if isinstance(b.get("reply_text"), str)][:12]


def ts(ms, mark):
    return "%02d:%02d:%02d%s%03d" % (ms // 3600000, ms // 60000 % 60, ms // 1000 % 60, mark, ms % 1000)


def vtt(turns):
    out = "WEBVTT\n\n"
    for i, (who, text) in enumerate(turns):
        out += "%d\n%s --> %s\n<v %s>%s</v>\n\n" % (i + 1, ts(i * 2000, "."), ts(i * 2000 + 1500, "."), who, text)
    return out


def srt(turns):
    out = ""
    for i, (who, text) in enumerate(turns):
        out += "%d\n%s --> %s\n%s: %s\n\n" % (i + 1, ts(i * 2000, ","), ts(i * 2000 + 1500, ","), who, text)
    return out


def jl(turns):
    return "".join(compact({"speaker": w, "text": t, "start": i * 2.0, "end": i * 2.0 + 1.5}) + "\n"
                   for i, (w, t) in enumerate(turns))


for k in range(0, len(texts), 3):
    turns = [("Ana Lima" if j % 2 else "Ben", t) for j, t in enumerate(texts[k:k + 3])]
    add("transcript_vtt", vtt(turns))
    add("transcript_srt", srt(turns))
    add("transcript_jsonl", jl(turns))
add("transcript_vtt", "\ufeffWEBVTT - a call\nKind: captions\n\nNOTE by hand\nover two lines\n\n1\n"
    "00:00:01.000 --> 00:00:04.200 align:start\n<v Ana Lima>Hello, <i>everyone</i>.</v>\n\n"
    "00:05.000 --> 00:07.000\nBen: The budget is\nfifty thousand.\n\nSTYLE\n::cue { color: red }\n\n"
    "intro\n00:00:08.000 --> 00:00:09.000\n<v.loud Chris>Agreed &amp; done</v>\n\n00:00:10.000 --> 00:00:11.000\n\n")
add("transcript_vtt", "WEBVTT\n\nREGION\nid:r\n\n00:00:01.000 --> 00:00:02,5\n<c.x>{\\an8}&lt;3 &nbsp;&lrm;x</c>\n")
add("transcript_srt", "1\r\n00:00:01,000 --> 00:00:03,500\r\nAna: Hello <i>there</i>\r\nall of you\r\n\r\n\r\n"
    "2\r\n00:00:04,000 --> 00:00:05,000 X1:0\r\n{\\an8}Budget is 50k.\r\n\r\n3\r\n00:00:06,000 --> 00:00:07,000\r\n\r\n")
add("transcript_srt", "7\n100:00:09,000 --> 100:00:10,000\nNote that: x &amp; y\n")
add("transcript_jsonl", '{"speaker":"Ana","text":"Hello there","start":1.5,"end":2.25}\n\n'
    '{"text":"one two three four five"}\n{"text":"partial","is_final":false,"start_ms":9000}\n'
    '{"text":"next","speaker":null}\n')
add("transcript_jsonl", '\ufeff{"text":"a","start_ms":1e15}\n{"text":"b"}\n')

# --- SSE: the same bodies as the Hermes `/v1/events` stream sends them ---
for k in range(0, len(bodies), 6):
    stream = ": open\n\n"
    for j, b in enumerate(bodies[k:k + 6]):
        if b.get("status") == "typing":
            stream += "event: progress\ndata: %s\n\n" % compact(b)
        else:
            stream += "id: %d-0.%d\ndata: %s\n\n: keep-alive\n\n" % (k, j, compact(b))
    add("sse", b"\x00" + stream.encode())
    add("sse", b"\x03\x40\x80\xc0" + stream.replace("\n", "\r\n").encode())
add("sse", b"\x02\x10\x90id: 5\ndata: a\n\ndata: b\n\nid:\ndata: c\n\nretry: 10\nevent\ndata\n\n")
add("sse", b"\x01\x7fdata: x\r\ndata: y\r\rdata: z\n\n:comment\nid: 1\0\ndata: q\n\n")

# --- OpenClaw Gateway frames, both directions ---
for f in sorted(FIXTURES.glob("openclaw-gateway-*.jsonl")):
    for rec in jsonl(f):
        if rec.get("dir") in ("in", "out"):
            add("gateway_frames", compact(rec["frame"]))

# --- clawborrator hub frames (the hub_v1 AsyncAPI shapes) ---
for v in [
    {"type": "subscribed", "sessionId": "s", "role": "approver"},
    {"type": "subscribed", "sessionId": "s", "role": "auditor", "x": 1},
    {"type": "ack", "ok": True, "chatId": "c9"},
    {"type": "ack", "ok": True},
    {"type": "event", "sessionId": "s", "event": {"kind": "chat", "type": "reply", "ts": "t1",
                                                  "payload": {"text": "a", "chatId": "c"}}},
    {"type": "event", "sessionId": "s", "event": {"kind": "chat", "type": "prompt", "ts": "t",
                                                  "payload": {"text": "hi", "authorLogin": "ana"}}},
    {"type": "event", "sessionId": "s", "event": {"kind": "tail", "type": "PreToolUse",
                                                  "payload": {"tool_name": "Bash", "tool_input": {"command": "ls"}}, "ts": "t"}},
    {"type": "event", "sessionId": "s", "event": {"kind": "audit", "type": "x", "payload": {}, "ts": "t"}},
    {"type": "chat_reply_chunk", "sessionId": "s", "chatId": "c", "text": "par", "done": False},
    {"type": "permission_request", "sessionId": "g", "requestId": "r", "tool": "Write",
     "inputPreview": "{\"path\":\"a\"}", "ts": "t"},
    {"type": "permission_resolved", "sessionId": "g", "requestId": "r", "decision": "expired",
     "resolverLogin": None},
    {"type": "presence", "sessionId": "s", "attached": ["a", "b"], "joined": "b"},
    {"type": "channel_status", "sessionId": "s", "connected": False, "ts": "t"},
    {"type": "error", "ok": False, "code": "token_revoked", "message": "gone"},
    {"type": "op_message", "sessionId": "s", "authorLogin": "a", "text": "brb"},
    {"type": "file_event", "sessionId": "s", "action": "referenced", "file": {}},
    {"type": "route_reply", "routeId": "x"},
]:
    add("hub_frames", compact(v))
add("hub_frames", '{"type":7}')

# --- Host / Authorization checks: method, target, Host, Authorization, probe signature, tunnel host ---
CB = "cb-fuzz-token-0123456789abcdefghijklmnopqrs"
UI = "ui-fuzz-token-0123456789abcdefghijklmnopqrs"
for lines in [
    ["POST", "/tasks/57b46352-d234-47a1-9c26-2b81d24983df", "127.0.0.1:48123", "Bearer " + CB],
    ["POST", "/tasks/x", "LOCALHOST:48123 ", "bearer  " + CB + " "],
    ["POST", "/tasks/x", "[::1]:48123", "Basic " + CB],
    ["GET", "/api/sessions/", "localhost:48123", "Bearer " + UI],
    ["GET", "//api//calls", "127.0.0.1:48123", "Bearer " + UI + "x"],
    ["GET", "/api/events?access_token=" + UI, "127.0.0.1:48123", ""],
    ["GET", "/api/openapi.json", "evil.example:48123", ""],
    ["GET", "/index.html", "abc.ngrok.app", "", "", "ABC.ngrok.app"],
    ["GET", "/probe/bm9uY2U", "abc.ngrok.app", "", "c2lnbmF0dXJl", "abc.ngrok.app"],
    ["POST", "http://127.0.0.1:48123/tasks/x", "127.0.0.1:48124", "Bearer " + CB],
]:
    add("http_checks", "\n".join(lines))


# --- BYO relay envelopes: the vectors the Hermes plugin generated, and envelopes the plugins
# posted in recorded runs; then field/plaintext splits (0xFF-separated) for the seal round trip ---
VECTORS = HERE.parent / "tests" / "fixtures" / "vectors" / "byo-envelopes.json"
vec = json.loads(VECTORS.read_text())
for group in ("random_nonce_envelopes", "negative", "accepted_edge_cases", "captured_from_live_run"):
    for case in vec.get(group, []):
        if isinstance(case.get("envelope"), dict):
            add("byo_envelope", compact(case["envelope"]))
for f in sorted(FIXTURES.glob("*relay-requests.jsonl")):
    for rec in jsonl(f):
        body = rec.get("body")
        env = body.get("envelope") if isinstance(body, dict) else None
        if isinstance(env, dict):
            add("byo_envelope", compact(env))
for raw in [
    b"{}", b'{"version":"static_v1"}', b'{"sender_role":"plugin","message_id":"m","session_id":"\u00e9","correlation_id":"\u2028","content_type":"t","nonce":"","ciphertext":"="}',
    b"sess-1\xffcorr-1\xfftask_content\xff{\"text\":\"hi\"}",
    "s\u00e9ssion\xffc\xfft\xffplain \U0001f600".encode("utf-8", "surrogatepass"),
    b"\x00\x01\xff\x7f\xff\n\xff",
]:
    add("byo_envelope", raw)


def main():
    n = 0
    for target, items in sorted(seeds.items()):
        d = CORPUS / target
        d.mkdir(parents=True, exist_ok=True)
        for data in sorted(items):
            p = d / ("seed-" + hashlib.sha1(data).hexdigest()[:16])
            if not p.exists():
                p.write_bytes(data)
                n += 1
    print("%d new seeds in %s (%s)" % (n, CORPUS, ", ".join("%s: %d" % (t, len(s)) for t, s in sorted(seeds.items()))))


if __name__ == "__main__":
    sys.exit(main())
