//! The signed probe: proof that a public URL really reaches this app's callback listener.
//!
//! The app issues a random nonce, then sends `GET {origin}/probe/{nonce}` through the tunnel
//! with `X-StageWhisper-Probe: HMAC-SHA256(callback token, "stagewhisper-probe-request\n" +
//! nonce)`. The callback listener hands every request to [`ProbeResponder::answer`] first; it
//! answers only a nonce it issued itself (pending, at most [`PROBE_TTL`] old) with a valid
//! signature: it records the arrival (and the `Host` it came with) and answers `200
//! {"ok":true,"probe":HMAC(token, "stagewhisper-probe-response\n" + nonce)}`. Anything else
//! falls through to the listener's normal routing (403 `bad_host` / 404 `not_found`), so the
//! route is no oracle and needs no bearer token; the token itself never travels.
//!
//! The probe passed when both hold: the listener saw the nonce arrive, and the answer carries
//! the right HMAC (a different server, or another StageWhisper with another token, cannot
//! produce it).

use crate::http::{self, Resp};
use crate::tokens::{secret_eq, Secret};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use hyper::header::HOST;
use hyper::{Method, Request, StatusCode};
use rand::RngCore;
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The probe route's prefix on the callback listener.
pub const PROBE_PATH: &str = "/probe/";
/// The request header that carries the request signature.
pub const PROBE_HEADER: &str = "x-stagewhisper-probe";
/// How long an issued nonce is answered.
pub const PROBE_TTL: Duration = Duration::from_secs(60);
/// At most this many probes pending at once (older ones are dropped).
const MAX_PENDING: usize = 32;

const REQUEST_LABEL: &str = "stagewhisper-probe-request\n";
const RESPONSE_LABEL: &str = "stagewhisper-probe-response\n";

/// HMAC-SHA256 of `label + nonce` under `key`, base64url without padding.
fn sign(key: &str, label: &str, nonce: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(label.as_bytes());
    mac.update(nonce.as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// What the listener saw of a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The `Host` header it came with (lowercased), if any.
    pub host: Option<String>,
}

#[derive(Debug)]
struct Pending {
    issued: Instant,
    arrived: Option<Arrival>,
}

/// An issued probe: where to send it and what to expect back.
#[derive(Debug, Clone)]
pub struct IssuedProbe {
    pub nonce: String,
    /// Value of the [`PROBE_HEADER`] request header.
    pub signature: String,
    /// The `probe` field a genuine answer carries.
    pub expected_answer: String,
}

/// Issues probes and answers them on the callback listener. Shared by the tunnel manager
/// (issues, checks) and the listener (answers).
pub struct ProbeResponder {
    token: Arc<Secret>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for ProbeResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeResponder")
            .field(
                "pending",
                &self.pending.lock().map(|p| p.len()).unwrap_or(0),
            )
            .finish()
    }
}

impl ProbeResponder {
    pub fn new(token: Arc<Secret>) -> ProbeResponder {
        ProbeResponder {
            token,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// A fresh nonce, pending until [`ProbeResponder::finish`] or [`PROBE_TTL`].
    pub fn issue(&self) -> IssuedProbe {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let nonce = URL_SAFE_NO_PAD.encode(bytes);
        let key = self.token.get();
        let probe = IssuedProbe {
            signature: sign(&key, REQUEST_LABEL, &nonce),
            expected_answer: sign(&key, RESPONSE_LABEL, &nonce),
            nonce: nonce.clone(),
        };
        let mut p = self.pending.lock().expect("probe lock");
        p.retain(|_, v| v.issued.elapsed() < PROBE_TTL);
        while p.len() >= MAX_PENDING {
            let oldest = p
                .iter()
                .min_by_key(|(_, v)| v.issued)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => p.remove(&k),
                None => break,
            };
        }
        p.insert(
            nonce,
            Pending {
                issued: Instant::now(),
                arrived: None,
            },
        );
        probe
    }

    /// Forgets the probe; tells whether (and how) it arrived.
    pub fn finish(&self, nonce: &str) -> Option<Arrival> {
        self.pending
            .lock()
            .expect("probe lock")
            .remove(nonce)
            .and_then(|p| p.arrived)
    }

    /// Whether `answer` is the genuine answer to `probe` (constant-time compare).
    pub fn answer_matches(probe: &IssuedProbe, answer: &str) -> bool {
        secret_eq(&probe.expected_answer, answer)
    }

    /// The listener calls this first with every request: `Some` only for `GET /probe/{nonce}`
    /// with a pending nonce and a valid signature (any `Host`: the probe is how the app learns
    /// which `Host` the tunnel delivers); `None` lets the listener route the request as usual.
    pub fn answer<B>(&self, req: &Request<B>) -> Option<Resp> {
        let nonce = req.uri().path().strip_prefix(PROBE_PATH)?;
        if nonce.is_empty() || nonce.contains('/') || req.method() != Method::GET {
            return None;
        }
        let presented = req.headers().get(PROBE_HEADER)?.to_str().ok()?;
        let key = self.token.get();
        if !secret_eq(&sign(&key, REQUEST_LABEL, nonce), presented.trim()) {
            return None;
        }
        let host = req
            .headers()
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(|h| h.trim().to_ascii_lowercase());
        {
            let mut p = self.pending.lock().expect("probe lock");
            let entry = p.get_mut(nonce)?;
            if entry.issued.elapsed() >= PROBE_TTL {
                return None;
            }
            entry.arrived = Some(Arrival { host: host.clone() });
        }
        tracing::debug!(host = ?host, "tunnel probe arrived");
        Some(http::json_response(
            StatusCode::OK,
            &serde_json::json!({"ok": true, "probe": sign(&key, RESPONSE_LABEL, nonce)}),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::CALLBACK_TOKEN_FILE;

    fn responder() -> (tempfile::TempDir, ProbeResponder) {
        let dir = tempfile::tempdir().unwrap();
        let s = Secret::load(dir.path().join(CALLBACK_TOKEN_FILE)).unwrap();
        (dir, ProbeResponder::new(Arc::new(s)))
    }

    fn get(path: &str, sig: Option<&str>, host: &str) -> Request<()> {
        let mut b = Request::get(path).header(HOST, host);
        if let Some(s) = sig {
            b = b.header(PROBE_HEADER, s);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn answers_only_its_own_signed_nonces() {
        let (_d, r) = responder();
        let p = r.issue();
        // Unknown nonce, missing or wrong signature, wrong method: not answered.
        assert!(r
            .answer(&get("/probe/nope", Some(&p.signature), "a.example"))
            .is_none());
        assert!(r
            .answer(&get(&format!("/probe/{}", p.nonce), None, "a.example"))
            .is_none());
        assert!(r
            .answer(&get(
                &format!("/probe/{}", p.nonce),
                Some("bad"),
                "a.example"
            ))
            .is_none());
        let post = Request::post(format!("/probe/{}", p.nonce))
            .header(PROBE_HEADER, &p.signature)
            .body(())
            .unwrap();
        assert!(r.answer(&post).is_none());
        assert!(r.finish(&p.nonce).is_none(), "nothing arrived yet");

        let p = r.issue();
        let resp = r
            .answer(&get(
                &format!("/probe/{}", p.nonce),
                Some(&p.signature),
                "Desk.Example:443",
            ))
            .expect("answered");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            r.finish(&p.nonce),
            Some(Arrival {
                host: Some("desk.example:443".into())
            })
        );
        assert!(r.finish(&p.nonce).is_none(), "finished once");
    }

    #[test]
    fn the_answer_depends_on_the_token() {
        let (_d, r) = responder();
        let p = r.issue();
        assert!(ProbeResponder::answer_matches(&p, &p.expected_answer));
        assert!(!ProbeResponder::answer_matches(&p, &p.signature));
        let (_d2, other) = responder();
        let q = other.issue();
        assert_ne!(
            sign(&r.token.get(), RESPONSE_LABEL, &q.nonce),
            q.expected_answer
        );
    }

    #[test]
    fn debug_never_carries_the_token() {
        let (_d, r) = responder();
        assert!(!format!("{r:?}").contains(&r.token.get()));
    }

    #[test]
    fn pending_probes_are_bounded() {
        let (_d, r) = responder();
        let first = r.issue();
        for _ in 0..MAX_PENDING + 5 {
            r.issue();
        }
        assert!(r.pending.lock().unwrap().len() <= MAX_PENDING);
        assert!(!r.pending.lock().unwrap().contains_key(&first.nonce));
    }
}
