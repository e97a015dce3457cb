//! The window's two commands (invoked by the web UI's Tauri transport):
//!
//! - `invoke('api', {method, path, body})` → `{status, body}`: one control API request, built as
//!   an `http::Request` and run through the very router of the HTTP control API
//!   ([`ControlApi::call`]), so the routes, answers, limits and error codes are exactly those of
//!   the HTTP control API (minus `GET /api/events`, replaced by `sw-event`). No UI token and no
//!   `Host` check: `call` marks the request in-process, which stands in for those HTTP-only
//!   checks (the IPC only reaches the app's own window, see the capability in
//!   `tauri.conf.json`).
//! - `invoke('events_since', {after, limit?})` → `[event]`: the events of the log after the cursor
//!   `after`, oldest first, each the JSON object of an SSE `data:` line; with `limit`, at most
//!   that many (one page: the UI asks again from the last one while a page comes back full, so a
//!   long catch-up never travels as one answer), without it every one.
//!
//! No rules here: the logic sits on [`Shell`] (plain async methods, testable without a window).

use serde::Serialize;
use serde_json::{json, Value};
use stagewhisper_core::api::ControlApi;
use stagewhisper_core::events::Event;
use stagewhisper_core::store::{Store, StoreError};
use std::sync::Arc;
use tauri::http::{Method, Request};

/// Largest request body, as on the HTTP control API (the router enforces it; the tests size
/// their oversize body with it).
#[cfg_attr(not(test), allow(dead_code))]
pub const MAX_BODY: usize = stagewhisper_core::api::MAX_API_BODY;
/// Events read from the log per query.
const PAGE: i64 = 500;

/// What the commands reach: the control API and the event log.
pub struct Shell {
    pub api: Arc<ControlApi>,
    pub store: Store,
}

/// The answer of `api`: the HTTP status and the JSON body the HTTP route would send.
#[derive(Debug, Serialize)]
pub struct ApiReply {
    pub status: u16,
    pub body: Value,
}

impl ApiReply {
    fn error(status: u16, code: &str, message: &str) -> ApiReply {
        ApiReply {
            status,
            body: json!({"ok": false, "error": code, "message": message}),
        }
    }
}

impl Shell {
    /// One control API request. `path` may carry a query string (the routes that take one read
    /// it: search, export, message pages); `body` is the JSON request body (`None`/`null` = no
    /// body). A text answer (an export as Markdown) comes back as a JSON string.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> ApiReply {
        let Ok(method) = Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else {
            return ApiReply::error(400, "invalid_method", "not an HTTP method");
        };
        let path = path.split('#').next().unwrap_or_default();
        // Like the HTTP listener: only POST/PUT/PATCH carry a body.
        let bytes = match body {
            Some(v)
                if !v.is_null() && matches!(method, Method::POST | Method::PUT | Method::PATCH) =>
            {
                serde_json::to_vec(v).expect("a JSON value serializes")
            }
            _ => Vec::new(),
        };
        let Ok(req) = Request::builder().method(method).uri(path).body(bytes) else {
            return ApiReply::error(404, "not_found", "no such route");
        };
        let (status, body) = self.api.call(req).await;
        ApiReply {
            status: status.as_u16(),
            body,
        }
    }

    /// Every event after the cursor `after`, oldest first.
    pub async fn events_since(&self, after: i64) -> Result<Vec<Value>, StoreError> {
        self.events_since_paged(after, PAGE).await
    }

    /// At most `limit` (1 to the page size) events after the cursor `after`, oldest first.
    pub async fn events_page(&self, after: i64, limit: i64) -> Result<Vec<Value>, StoreError> {
        let rows = self
            .store
            .events_after(after.max(0), limit.clamp(1, PAGE))
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, data)| {
                let e = Event::from_stored(id, &data);
                serde_json::from_str(&e.json).unwrap_or(Value::Null)
            })
            .collect())
    }

    async fn events_since_paged(&self, after: i64, page: i64) -> Result<Vec<Value>, StoreError> {
        let mut cursor = after.max(0);
        let mut out = Vec::new();
        loop {
            let rows = self.store.events_after(cursor, page).await?;
            let full = rows.len() as i64 == page;
            for (id, data) in rows {
                cursor = id;
                let e = Event::from_stored(id, &data);
                out.push(serde_json::from_str(&e.json).unwrap_or(Value::Null));
            }
            if !full {
                return Ok(out);
            }
        }
    }
}

#[tauri::command]
pub async fn api(
    shell: tauri::State<'_, Shell>,
    method: String,
    path: String,
    body: Option<Value>,
) -> Result<ApiReply, String> {
    Ok(shell.call(&method, &path, body.as_ref()).await)
}

#[tauri::command]
pub async fn events_since(
    shell: tauri::State<'_, Shell>,
    after: i64,
    limit: Option<i64>,
) -> Result<Vec<Value>, String> {
    match limit {
        Some(n) => shell.events_page(after, n).await,
        None => shell.events_since(after).await,
    }
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::{App, Config};

    async fn start() -> (tempfile::TempDir, App, Shell) {
        let tmp = tempfile::tempdir().unwrap();
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        let shell = Shell {
            api: app.api.clone(),
            store: app.conversation.store().clone(),
        };
        (tmp, app, shell)
    }

    #[tokio::test]
    async fn api_routes_like_the_http_control_api() {
        let (_tmp, app, shell) = start().await;
        let r = shell.call("POST", "/api/calls", None).await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        let sid = r.body["session_id"].as_str().unwrap().to_string();
        assert_eq!(r.body["session"]["is_call"], true, "{:?}", r.body);

        let r = shell.call("get", "/api/sessions?x=1", None).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.body.as_array().unwrap().len(), 1, "{:?}", r.body);
        // The query reaches the routes that read one; a Markdown export is a JSON string.
        let r = shell
            .call("GET", "/api/search?q=nothing%20here", None)
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.body["query"], "nothing here", "{:?}", r.body);
        let r = shell.call("GET", "/api/search?q=%22", None).await;
        assert_eq!(r.body["error"], "empty_query", "{:?}", r.body);
        let r = shell
            .call(
                "GET",
                &format!("/api/sessions/{sid}/export?format=md"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert!(
            r.body
                .as_str()
                .is_some_and(|md| md.contains("## Transcript")),
            "{:?}",
            r.body
        );
        let r = shell
            .call(
                "GET",
                &format!("/api/sessions/{sid}/messages?limit=1"),
                None,
            )
            .await;
        assert!(r.body["items"].is_array(), "{:?}", r.body);

        let path = format!("/api/sessions/{sid}/messages");
        let r = shell
            .call("POST", &path, Some(&json!({"text": "hello"})))
            .await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        assert_eq!(r.body["kind"], "user", "{:?}", r.body);
        let r = shell.call("POST", &path, Some(&Value::Null)).await;
        assert_eq!(
            (r.status, r.body["error"].as_str()),
            (400, Some("missing_field"))
        );
        let r = shell.call("GET", &path, None).await;
        assert_eq!(r.body.as_array().unwrap().len(), 1, "{:?}", r.body);

        let r = shell.call("GET", "/api/settings", None).await;
        assert_eq!(r.body["callback_url"], app.callback_url.as_str());

        for (method, path, status, code) in [
            ("GET", "/api/events", 404, "not_found"),
            ("GET", "/nope", 404, "not_found"),
            ("PUT", "/api/calls", 405, "method_not_allowed"),
            ("GE T", "/api/sessions", 400, "invalid_method"),
            ("DELETE", "/api/sessions/unknown", 404, "session_not_found"),
        ] {
            let r = shell.call(method, path, None).await;
            assert_eq!(
                (r.status, r.body["error"].as_str()),
                (status, Some(code)),
                "{method} {path}: {:?}",
                r.body
            );
        }
        let big = json!({"text": "x".repeat(MAX_BODY)});
        let r = shell.call("POST", &path, Some(&big)).await;
        assert_eq!(r.status, 413, "{:?}", r.body);
        app.shutdown().await;
    }

    #[tokio::test]
    async fn events_since_returns_everything_after_the_cursor_in_order() {
        let (_tmp, app, shell) = start().await;
        for i in 0..5 {
            let r = shell
                .call(
                    "POST",
                    "/api/sessions",
                    Some(&json!({"title": format!("s{i}")})),
                )
                .await;
            assert_eq!(r.status, 201, "{:?}", r.body);
        }
        let all = shell.events_since(0).await.unwrap();
        assert_eq!(all.len(), 5, "{all:?}");
        let ids: Vec<i64> = all.iter().map(|e| e["id"].as_i64().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert!(
            all.iter().all(|e| e["type"] == "session_created"),
            "{all:?}"
        );
        assert_eq!(all[0]["session"]["title"], "s0");

        // Several pages give the same answer as one.
        assert_eq!(shell.events_since_paged(0, 2).await.unwrap(), all);
        assert_eq!(shell.events_since_paged(ids[1], 1).await.unwrap(), all[2..]);
        assert!(shell.events_since(ids[4]).await.unwrap().is_empty());
        assert_eq!(shell.events_since(-7).await.unwrap(), all);
        // One page at a time, from the last event of the page before: the same events.
        let mut paged = Vec::new();
        let mut after = 0;
        loop {
            let page = shell.events_page(after, 2).await.unwrap();
            assert!(page.len() <= 2);
            let Some(last) = page.last() else { break };
            after = last["id"].as_i64().unwrap();
            paged.extend(page);
        }
        assert_eq!(paged, all);
        assert_eq!(shell.events_page(0, 0).await.unwrap(), all[..1]);
        app.shutdown().await;
    }
}
