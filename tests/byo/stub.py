"""The interop suite's stub model (tests/interop/stub_model.py), taught one more thing for the
BYO reasoning jobs: when a request asks for JSON matching a JSON Schema (the plugins put the
job's `response_schema` into the system prompt or the instructions), the answer is a JSON
instance of that schema whose strings quote the transcript ("Stub insight: ..."). Chat and the
capability probe get the usual "Stub reply #N: <user text>". Stdlib only, loopback only.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "interop"))

import stub_model  # noqa: E402
from stub_model import MODEL_ID as STUB_ID  # noqa: E402
from stub_model import Plan, StubModelServer, StubState, message_text  # noqa: E402


def json_objects(text: str) -> list[Any]:
    """Every JSON object embedded in `text` (scanning from each `{`)."""
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text[m.start():])
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def transcript_of(text: str) -> str:
    for obj in json_objects(text):
        t = obj.get("transcript")
        if isinstance(t, str) and t.strip():
            return t
        if isinstance(t, list) and t:
            return json.dumps(t, ensure_ascii=False)
    return text


def instance(schema: Any, hint: str) -> Any:
    """A value valid against `schema` (the common keywords), strings built from `hint`."""
    if not isinstance(schema, dict):
        return f"Stub insight: {hint}"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            subs = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")]
            return instance(subs[0] if subs else {"type": "null"}, hint)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "null")
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        return {k: instance(v, hint) for k, v in props.items()}
    if t == "array":
        return [instance(schema.get("items") or {"type": "string"}, hint)]
    if t == "boolean":
        return True
    if t in ("integer", "number"):
        return max(0, int(schema.get("minimum", 1)))
    if t == "null":
        return None
    text = f"Stub insight: {hint}"
    if isinstance(schema.get("maxLength"), int):
        text = text[: schema["maxLength"]]
    return text


MARKER = "JSON Schema:"


def schema_after_marker(text: str) -> dict[str, Any] | None:
    """The schema both plugins print after "JSON Schema:" in their reasoning prompt."""
    i = text.rfind(MARKER)
    if i < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[i + len(MARKER):].lstrip())
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class ByoStubState(StubState):
    def plan(self, body: dict[str, Any]) -> tuple[Plan, int]:
        messages = body.get("messages") or []
        every = "\n".join(message_text(m) for m in messages)
        schema = schema_after_marker(every)
        if schema is None or (messages and messages[-1].get("role") == "tool"):
            return super().plan(body)
        n = self.next_n()
        user = "\n".join(message_text(m) for m in messages if m.get("role") == "user")
        hint = " ".join(transcript_of(user).split())[-120:]
        if isinstance(schema.get("properties"), dict) and schema["properties"]:
            answer = instance(schema, hint)
        else:  # no schema to follow (the capability probe): a profile line
            answer = {"raw_description": f"Stub model {STUB_ID}: answers JSON for tests"}
        plan = Plan("text", json.dumps(answer, ensure_ascii=False))
        self.record(body, plan, n)
        return plan, n


class ByoStubServer(StubModelServer):
    def __init__(self, port: int = 0, log_path: str | None = None):
        super().__init__(port, log_path)
        self.state = ByoStubState(log_path)
        self.httpd.state = self.state  # type: ignore[attr-defined]


__all__ = ["ByoStubServer", "instance", "schema_after_marker", "stub_model"]
