//! What every control API route answers and reads, wherever its handler lives (the route table
//! in [`crate::api`], the tunnel's routes, an assistant kind's own routes): the error answer
//! (`{"ok":false,"error","message"}` with a stable code), the JSON answer, and the body
//! extractor that turns every rejection (bad JSON, a missing or mistyped field) into those codes
//! instead of axum's plain-text rejections.
//!
//! It sits below every room that serves routes and imports none of them.

use crate::conversation::CoreError;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

/// Largest control API request body (HTTP and IPC alike).
pub const MAX_API_BODY: usize = 256 * 1024;
/// Largest user message.
pub const MAX_USER_TEXT: usize = 16_000;

/// An error answer: the status and `{"ok":false,"error":code,"message":text}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl std::fmt::Display) -> Self {
        ApiError {
            status,
            code,
            message: message.to_string(),
        }
    }

    /// `400` with `code`.
    pub fn bad(code: &'static str, message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such route")
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed on this route",
        )
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"ok": false, "error": self.code, "message": self.message})
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        let status = match e {
            CoreError::SessionNotFound | CoreError::MessageNotFound => StatusCode::NOT_FOUND,
            CoreError::NotACall | CoreError::CallEnded => StatusCode::CONFLICT,
            CoreError::EmptyText => StatusCode::BAD_REQUEST,
            CoreError::StorageUnavailable(_) | CoreError::Stopped => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        ApiError::new(status, e.code(), e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, self.body().to_string().into_bytes())
    }
}

/// The error answer as the OpenAPI document describes it.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorDoc {
    /// Always `false`.
    pub ok: bool,
    /// The stable error code (`not_found`, `missing_field`, `session_not_found`, …).
    pub error: String,
    /// One sentence for people.
    pub message: String,
}

/// A JSON answer with its status.
pub struct Reply(pub StatusCode, pub Bytes);

impl Reply {
    pub fn new<T: Serialize>(status: StatusCode, value: T) -> Self {
        // The views are plain data: serializing them cannot fail.
        Reply(
            status,
            serde_json::to_vec(&value)
                .unwrap_or_else(|_| b"null".to_vec())
                .into(),
        )
    }

    pub fn ok<T: Serialize>(value: T) -> Self {
        Self::new(StatusCode::OK, value)
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        json_response(self.0, self.1)
    }
}

/// What a route answers.
pub type ApiResult = Result<Reply, ApiError>;

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(axum::body::Body::from(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `{"ok": true}`.
#[derive(Serialize, ToSchema)]
pub struct OkDoc {
    /// Always `true`.
    pub ok: bool,
}

/// A JSON request body, read into `T`. The body has already been read (within the size and time
/// limits) by the guard in front of the routes; an empty body is `{}`, so a route whose fields
/// are all optional needs none. Rejections keep the control API's codes:
/// - not a JSON object → `400 invalid_json`;
/// - a required field absent or `null` → `400 missing_field` (`null` = absent everywhere);
/// - a field of the wrong type or value → `400 invalid_field`.
///
/// No `Content-Type` is required (the UI's IPC transport sends none).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        let bytes = req
            .into_body()
            .collect()
            .await
            .map_err(|e| ApiError::bad("bad_request", e))?
            .to_bytes();
        let value = parse_object(&bytes)?;
        from_value(value).map(JsonBody)
    }
}

/// A body as a JSON object (`{}` when empty).
pub fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ApiError::bad("invalid_json", "expected a JSON object")),
        Err(e) => Err(ApiError::bad("invalid_json", e)),
    }
}

/// Reads a request type from a JSON object, with the control API's codes for what is wrong.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        field_error(&path, &inner)
    })
}

fn field_error(path: &str, message: &str) -> ApiError {
    // serde's wording: "missing field `x`" (the path is the parent's), "invalid type: null, …".
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        let full = if path == "." {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        return ApiError::bad("missing_field", format!("`{full}` is required"));
    }
    if path == "." {
        // Inside a tagged body the path is not tracked: serde's sentence names the problem.
        let code = if message.starts_with("invalid type: null") {
            "missing_field"
        } else {
            "invalid_field"
        };
        return ApiError::bad(code, message);
    }
    if message.starts_with("invalid type: null") {
        return ApiError::bad("missing_field", format!("`{path}` is required"));
    }
    ApiError::bad("invalid_field", format!("`{path}`: {message}"))
}

/// A path parameter (percent-decoded). One that is not valid UTF-8 cannot name anything: `404`.
pub struct Param(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|p| Param(p.0))
            .map_err(|_| ApiError::not_found())
    }
}

/// Two path parameters.
pub struct Params2(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for Params2 {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map(|p| Params2(p.0 .0, p.0 .1))
            .map_err(|_| ApiError::not_found())
    }
}

/// A refusal of the pipeline: an HTTP status, a stable code and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AudioError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl AudioError {
    /// `400`.
    pub fn bad(code: &'static str, message: impl Into<String>) -> AudioError {
        AudioError {
            status: 400,
            code,
            message: message.into(),
        }
    }

    /// `503 audio_unavailable`: no sound server reachable (or this build cannot hear).
    pub fn unavailable(message: impl Into<String>) -> AudioError {
        AudioError {
            status: 503,
            code: "audio_unavailable",
            message: message.into(),
        }
    }

    /// `502 engine_failed`: the speech engine did not answer.
    pub fn engine(message: impl Into<String>) -> AudioError {
        AudioError {
            status: 502,
            code: "engine_failed",
            message: message.into(),
        }
    }

    /// `500` with a code (a settings file that cannot be written, …).
    pub fn internal(code: &'static str, message: impl Into<String>) -> AudioError {
        AudioError {
            status: 500,
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::double_option;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        text: String,
        title: Option<String>,
        #[serde(default, deserialize_with = "double_option")]
        prelude: Option<Option<String>>,
        n: Option<u64>,
    }

    fn code(v: Value) -> &'static str {
        from_value::<Body>(v).unwrap_err().code
    }

    #[test]
    fn rejections_keep_the_control_api_codes() {
        assert_eq!(code(json!({})), "missing_field");
        assert_eq!(code(json!({"text": null})), "missing_field");
        assert_eq!(code(json!({"text": 5})), "invalid_field");
        assert_eq!(code(json!({"text": "x", "title": []})), "invalid_field");
        assert_eq!(code(json!({"text": "x", "n": -1})), "invalid_field");
        assert_eq!(code(json!({"text": "x", "n": 1.5})), "invalid_field");
        let e = from_value::<Body>(json!({})).unwrap_err();
        assert_eq!(e.message, "`text` is required");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let b: Body = from_value(json!({"text": "x", "title": null, "extra": 1})).unwrap();
        assert_eq!((b.title, b.prelude), (None, None));
        let b: Body = from_value(json!({"text": "x", "prelude": null})).unwrap();
        assert_eq!(b.prelude, Some(None));
        let b: Body = from_value(json!({"text": "x", "prelude": "p"})).unwrap();
        assert_eq!(b.prelude, Some(Some("p".into())));
        for body in [&b"[1]"[..], b"{", b"\"x\"", b"null"] {
            assert_eq!(parse_object(body).unwrap_err().code, "invalid_json");
        }
        assert_eq!(parse_object(b"  \n").unwrap(), json!({}));
    }
}
