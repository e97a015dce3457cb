//! The handshake on a new socket: the gateway's `connect.challenge`, the signed `connect`
//! request, then `hello-ok` (the connection is online) or a refusal, classified into what the
//! supervisor does next ([`Outcome`]).

use super::online::Online;
use super::socket::{next_inbound, open_socket, Ws};
use super::supervisor::{Outcome, Supervisor};
use super::{CLIENT_ID, CLIENT_MODE, ROLE, SCOPES};
use crate::assistants::kinds::openclaw_gateway::frames::{
    Challenge, ClientInfo, ConnectAuth, ConnectParams, DeviceProof, ErrorShape, HelloOk, Inbound,
    Request, PROTOCOL,
};
use crate::assistants::kinds::openclaw_gateway::identity::SignedFields;
use futures_util::SinkExt;
use serde_json::Value;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

impl Supervisor {
    /// Opens a socket and goes through the handshake. `Err`: why this connection did not get
    /// online, and what to do next.
    pub(super) async fn handshake(&self) -> Result<Online, Outcome> {
        let timeout = self.settings.request_timeout;
        let mut ws = open_socket(&self.url, timeout)
            .await
            .map_err(|why| Outcome::Retry {
                code: "unreachable",
                why,
                hint: None,
            })?;
        // 1. connect.challenge
        let challenge = read_challenge(&mut ws, timeout).await?;
        // 2. signed connect
        let device_token = self.tokens.load(self.url.as_str(), &self.settings.token);
        let used_device_token = device_token.is_some();
        let params = self.connect_params(&challenge, device_token.as_deref());
        let id = send_connect(&mut ws, &params).await?;
        tracing::debug!(used_device_token, "connect sent");
        // 3. hello-ok or a refusal
        match read_connect_answer(&mut ws, &id, timeout).await? {
            Ok(payload) => {
                let hello = self.accept_hello(&payload, device_token.as_deref())?;
                Ok(Online { ws, hello })
            }
            Err(e) => {
                tracing::info!(code = %e.code, detail = e.detail_code().unwrap_or(""), "connect refused: {}", e.message);
                let outcome = classify_refusal(&e, used_device_token);
                let _ = ws.close(None).await;
                Err(outcome)
            }
        }
    }

    /// The `connect` params answering `challenge`, signed with the device identity. The stored
    /// `device_token` is used when there is one, else the shared token.
    fn connect_params(&self, challenge: &Challenge, device_token: Option<&str>) -> ConnectParams {
        let auth = match device_token {
            Some(t) => ConnectAuth {
                token: None,
                device_token: Some(t.to_string()),
            },
            None => ConnectAuth {
                token: Some(self.settings.token.clone()),
                device_token: None,
            },
        };
        let signed_token = auth
            .token
            .as_deref()
            .or(auth.device_token.as_deref())
            .unwrap_or("")
            .to_string();
        let scopes: Vec<String> = SCOPES.iter().map(|s| s.to_string()).collect();
        let platform = self.settings.platform.clone();
        let payload = SignedFields {
            device_id: self.identity.device_id(),
            client_id: CLIENT_ID,
            client_mode: CLIENT_MODE,
            role: ROLE,
            scopes: &scopes,
            signed_at: challenge.ts,
            token: &signed_token,
            nonce: &challenge.nonce,
            platform: &platform,
            device_family: "",
        }
        .v3();
        ConnectParams {
            min_protocol: PROTOCOL,
            max_protocol: PROTOCOL,
            client: ClientInfo {
                id: CLIENT_ID.into(),
                version: self.settings.client_version.clone(),
                platform,
                mode: CLIENT_MODE.into(),
                device_family: None,
            },
            role: ROLE.into(),
            scopes,
            caps: vec![],
            user_agent: format!("stagewhisper-desktop/{}", self.settings.client_version),
            locale: "en-US".into(),
            auth: Some(auth),
            device: Some(DeviceProof {
                id: self.identity.device_id().to_string(),
                public_key: self.identity.public_key(),
                signature: self.identity.sign(&payload),
                signed_at: challenge.ts,
                nonce: challenge.nonce.clone(),
            }),
        }
    }

    /// Reads the `hello-ok` payload: a protocol other than ours is refused for good; a device
    /// token the gateway hands out (a new one) is stored for the next connects.
    fn accept_hello(
        &self,
        payload: &Value,
        device_token: Option<&str>,
    ) -> Result<HelloOk, Outcome> {
        let hello = HelloOk::from_payload(payload).map_err(|e| Outcome::Final {
            code: "bad_hello",
            detail: format!("The gateway's hello could not be read ({e}): this OpenClaw version is not supported."),
        })?;
        if hello.protocol != PROTOCOL {
            return Err(Outcome::Final {
                code: "protocol_mismatch",
                detail: format!("This gateway speaks protocol {} and StageWhisper speaks protocol {PROTOCOL}: update OpenClaw or StageWhisper so that both speak the same version.", hello.protocol),
            });
        }
        if let Some(dt) = hello.auth.as_ref().and_then(|a| a.device_token.as_deref()) {
            if device_token != Some(dt) {
                if let Err(e) = self
                    .tokens
                    .save(self.url.as_str(), &self.settings.token, dt)
                {
                    tracing::warn!(error = %e, code = e.code(), "cannot store the device token");
                }
            }
        }
        Ok(hello)
    }
}

/// Waits for `connect.challenge` (other frames before it are skipped).
async fn read_challenge(ws: &mut Ws, timeout: Duration) -> Result<Challenge, Outcome> {
    loop {
        match next_inbound(ws, timeout).await? {
            Inbound::Challenge(c) => return Ok(c),
            other => tracing::debug!(?other, "frame before the challenge"),
        }
    }
}

/// Sends the `connect` request; answers its request id.
async fn send_connect(ws: &mut Ws, params: &ConnectParams) -> Result<String, Outcome> {
    let id = uuid::Uuid::new_v4().to_string();
    let req = Request::new(
        id.clone(),
        "connect",
        serde_json::to_value(params).expect("connect params serialise"),
    );
    ws.send(Message::text(
        serde_json::to_string(&req).expect("frame serialises"),
    ))
    .await
    .map_err(|e| Outcome::Retry {
        code: "connection_lost",
        why: format!("sending connect failed: {e}"),
        hint: None,
    })?;
    Ok(id)
}

/// Waits for the answer to request `id` (`connect`): the `hello-ok` payload, or the refusal.
async fn read_connect_answer(
    ws: &mut Ws,
    id: &str,
    timeout: Duration,
) -> Result<Result<Value, ErrorShape>, Outcome> {
    loop {
        match next_inbound(ws, timeout).await? {
            Inbound::Response(r) if r.id == id => return Ok(r.result),
            other => tracing::debug!(?other, "frame before the connect answer"),
        }
    }
}

/// Classify a refused `connect`.
fn classify_refusal(e: &ErrorShape, used_device_token: bool) -> Outcome {
    let detail = e.detail_code().unwrap_or("");
    if detail == "PAIRING_REQUIRED" {
        return Outcome::Pairing {
            request_id: e
                .details
                .as_ref()
                .and_then(|d| d.request_id.clone())
                .unwrap_or_default(),
        };
    }
    if e.code == "UNAVAILABLE" || e.retryable == Some(true) {
        return Outcome::Retry {
            code: "gateway_unavailable",
            why: format!("the gateway is not ready: {}", e.message),
            hint: e.retry_after_ms.map(Duration::from_millis),
        };
    }
    if used_device_token && (detail.starts_with("AUTH_") || detail.contains("DEVICE_TOKEN")) {
        return Outcome::DeviceTokenRejected;
    }
    let (code, detail) = match detail {
        "AUTH_TOKEN_MISMATCH" => (
            "token_mismatch",
            "The gateway refused the token: it is not this gateway's token (gateway.auth.token). Correct it in Settings; StageWhisper does not retry with a wrong token.".to_string(),
        ),
        "AUTH_TOKEN_MISSING" => (
            "token_missing",
            "The gateway needs its token: enter the gateway token (gateway.auth.token) in Settings.".to_string(),
        ),
        "PROTOCOL_MISMATCH" => {
            let expected = e
                .details
                .as_ref()
                .and_then(|d| d.expected_protocol)
                .map(|p| p.to_string())
                .unwrap_or_else(|| "another version".into());
            (
                "protocol_mismatch",
                format!("This gateway speaks protocol {expected} and StageWhisper speaks protocol {PROTOCOL}: update OpenClaw or StageWhisper so that both speak the same version."),
            )
        }
        d if d.starts_with("DEVICE_") => (
            "device_rejected",
            format!("The gateway refused this device's identity ({d}: {}). Check that this computer's clock is right; if it is, remove the device on the gateway (openclaw devices) and connect again.", e.message),
        ),
        _ if e.message.contains("unexpected property") => (
            "unknown_field",
            format!("The gateway refused a field StageWhisper sent ({}): this OpenClaw version is not supported by this StageWhisper version.", e.message),
        ),
        _ if e.message.starts_with("invalid connect params") => (
            "invalid_params",
            format!("The gateway refused StageWhisper's connect request ({}): this OpenClaw version is not supported by this StageWhisper version.", e.message),
        ),
        _ => (
            "refused",
            format!("The gateway refused the connection: {} ({}).", e.message, e.code),
        ),
    };
    Outcome::Final { code, detail }
}
