//! The `Host` and `Authorization` checks of both listeners, on request heads built from the
//! input (method, target, `Host`, `Authorization`, the probe signature header, a tunnel host;
//! one per line): the callback listener's (`http::AllowedHosts`, `tokens::bearer` with the
//! callback token, the tunnel probe that runs before them) and the control API guard's
//! (`fuzzing::control_api_check`: the same Host list, the UI token in the header or, on the
//! SSE route, the query). A Host that is not the listener's is never accepted; a token is
//! never accepted unless the request carries it exactly; the probe answers no request (no
//! nonce was issued).
#![no_main]
use hyper::header::{HeaderValue, AUTHORIZATION, HOST, ORIGIN};
use hyper::http::uri::Authority;
use hyper::{Method, Request};
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::fuzzing::{control_api_check, Refusal};
use stagewhisper_core::http::AllowedHosts;
use stagewhisper_core::tokens::{bearer, Secret};
use stagewhisper_core::tunnel::probe::{ProbeResponder, PROBE_HEADER};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

const PORT: u16 = 48123;
/// The tokens the checks compare against (the seeds carry them, so the fuzzer starts from
/// accepted requests).
const CALLBACK_TOKEN: &str = "cb-fuzz-token-0123456789abcdefghijklmnopqrs";
const UI_TOKEN: &str = "ui-fuzz-token-0123456789abcdefghijklmnopqrs";

struct Fixture {
    callback: Arc<Secret>,
    ui: Secret,
    probes: ProbeResponder,
    _dir: std::path::PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("sw-fuzz-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = |name: &str, value: &str| {
            let p = dir.join(name);
            std::fs::write(&p, value).unwrap();
            Secret::load(p).unwrap()
        };
        let callback = Arc::new(secret("callback_token", CALLBACK_TOKEN));
        let ui = secret("ui_token", UI_TOKEN);
        std::fs::remove_dir_all(&dir).ok();
        Fixture {
            probes: ProbeResponder::new(callback.clone()),
            callback,
            ui,
            _dir: dir,
        }
    })
}

/// What the Host list may accept: the listener's own `host:port` forms, or the tunnel's host,
/// compared without case after trimming — and nothing else.
fn host_may_pass(raw: Option<&[u8]>, own: &[String], extra: Option<&str>) -> bool {
    // Only a visible-ASCII value is a host name (other bytes are refused before any compare).
    let Some(h) = raw
        .filter(|r| r.iter().all(|b| *b == b'\t' || (0x20..0x7f).contains(b)))
        .and_then(|r| std::str::from_utf8(r).ok())
    else {
        return false;
    };
    let h = h.trim();
    if extra.is_some_and(|e| h.eq_ignore_ascii_case(e)) {
        return true;
    }
    let named = own.iter().any(|o| h.eq_ignore_ascii_case(o));
    if named {
        // An own form: a loopback name with the listener's port, whatever the spelling.
        let a: Authority = h.parse().expect("own forms are authorities");
        assert_eq!(a.port_u16(), Some(PORT));
        assert!(matches!(
            a.host().to_ascii_lowercase().as_str(),
            "localhost" | "127.0.0.1" | "[::1]"
        ));
    }
    named
}

/// The bearer rule, written out: `Bearer`, one space, then the token (whitespace around it).
fn bearer_rule(raw: Option<&[u8]>, token: &str) -> bool {
    let Some(v) = raw
        .filter(|r| r.iter().all(|b| *b == b'\t' || (0x20..0x7f).contains(b)))
        .and_then(|r| std::str::from_utf8(r).ok())
    else {
        return false;
    };
    let v = v.trim();
    v.len() > 7
        && v.as_bytes()[..6].eq_ignore_ascii_case(b"bearer")
        && v.as_bytes()[6] == b' '
        && v[7..].trim() == token
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let mut fields = data.split(|b| *b == b'\n');
    let mut next = || fields.next().filter(|f| !f.is_empty());
    let method = next()
        .and_then(|m| Method::from_bytes(m).ok())
        .unwrap_or(Method::POST);
    let target = next().unwrap_or(b"/");
    let host = next();
    let auth = next();
    let probe_sig = next();
    let extra = next().and_then(|e| std::str::from_utf8(e).ok());
    let mut b = Request::builder().method(method).uri(target);
    for (name, value) in [
        (HOST.as_str(), host),
        (AUTHORIZATION.as_str(), auth),
        (PROBE_HEADER, probe_sig),
    ] {
        if let Some(v) = value.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            b = b.header(name, v);
        }
    }
    let Ok(req) = b.body(()) else {
        return;
    };
    // What the request really carries (a value hyper would not keep is absent).
    let header = |n| req.headers().get(n).map(HeaderValue::as_bytes);
    let (host_raw, auth_raw) = (header(HOST.as_str()), header(AUTHORIZATION.as_str()));

    // The tunnel probe comes first on the callback listener and answers only issued nonces.
    assert!(
        f.probes.answer(&req).is_none(),
        "probe answered without a nonce"
    );

    for addr in [
        SocketAddr::from(([127, 0, 0, 1], PORT)),
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, PORT)),
    ] {
        let hosts = AllowedHosts::for_addr(addr);
        let ip = match addr {
            SocketAddr::V4(a) => format!("{}:{PORT}", a.ip()),
            SocketAddr::V6(a) => format!("[{}]:{PORT}", a.ip()),
        };
        let own = [format!("localhost:{PORT}"), ip];
        if let Some(e) = extra {
            hosts.set_extra(vec![e.to_string()]);
        }
        let host_ok = hosts.allows(&req);
        assert_eq!(
            host_ok,
            host_may_pass(host_raw, &own, extra),
            "Host {host_raw:?}"
        );

        // The callback listener's bearer check, as `listener.rs` makes it.
        let presented = bearer(
            req.headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        );
        let cb_ok = presented.is_some_and(|t| f.callback.matches(t));
        assert_eq!(
            cb_ok,
            bearer_rule(auth_raw, CALLBACK_TOKEN),
            "Authorization {auth_raw:?}"
        );

        // The control API guard.
        let mut r = Request::builder().method(req.method()).uri(req.uri());
        for (n, v) in req.headers() {
            r = r.header(n, v);
        }
        let (path, verdict) = control_api_check(&hosts, &f.ui, r.body(()).unwrap());
        match verdict {
            Err(Refusal::BadHost) => assert!(!host_ok),
            Err(Refusal::BadOrigin) => {
                assert!(host_ok);
                assert!(
                    req.headers().contains_key(ORIGIN),
                    "bad_origin without an Origin"
                );
            }
            Err(Refusal::Unauthorized) => assert!(host_ok),
            Ok(()) => {
                assert!(host_ok, "a foreign Host passed the control API");
                let is_api = path == "/api" || path.starts_with("/api/");
                if is_api && path != "/api/openapi.json" {
                    let by_header = bearer_rule(auth_raw, UI_TOKEN);
                    let by_query = path == "/api/events"
                        && req
                            .uri()
                            .query()
                            .is_some_and(|q| contains(q.as_bytes(), UI_TOKEN));
                    assert!(
                        by_header || by_query,
                        "an /api route passed without the UI token"
                    );
                }
            }
        }
        // The normalised path is the request's path without the slashes around it.
        let trimmed = format!("/{}", req.uri().path().trim_matches('/'));
        assert!(path == req.uri().path() || path == trimmed);
    }
});
