//! Unit tests of the hub client's pure parts (URLs, settings, REST answers, memory).

use super::rest::MAX_REST_BYTES;
use super::worker::Memory;
use super::*;
use serde_json::json;

#[test]
fn hub_urls_become_cli_socket_urls() {
    let u = HubUrl::parse("https://Hub.Example.net").unwrap();
    assert_eq!(u.cli_url(), "wss://hub.example.net:443/cli");
    assert_eq!(
        u.http_url("/api/v1/me"),
        "https://hub.example.net:443/api/v1/me"
    );
    let u = HubUrl::parse("https://hub.example.net:8443/base/").unwrap();
    assert_eq!(u.cli_url(), "wss://hub.example.net:8443/base/cli");
    assert_eq!(
        HubUrl::parse("http://localhost:8787").unwrap().cli_url(),
        "ws://localhost:8787/cli"
    );
    assert_eq!(
        HubUrl::parse("http://127.0.0.1:9/").unwrap().cli_url(),
        "ws://127.0.0.1:9/cli"
    );
    let u = HubUrl::parse("http://[::1]:7000").unwrap();
    assert_eq!((u.host.as_str(), u.port), ("::1", 7000));
    assert_eq!(u.cli_url(), "ws://[::1]:7000/cli");
}

#[test]
fn plain_http_only_to_this_computer() {
    let e = HubUrl::parse("http://hub.example.net").unwrap_err();
    assert_eq!(e.code(), "insecure_url");
    assert_eq!(
        HubUrl::parse("http://10.0.0.2:8787").unwrap_err().code(),
        "insecure_url"
    );
    for bad in [
        "",
        "hub.example.net",
        "ws://127.0.0.1:1",
        "ftp://x",
        "https://u:p@hub.example.net",
        "https://hub.example.net/?a=1",
        "https://hub.example.net/#x",
    ] {
        assert_eq!(
            HubUrl::parse(bad).unwrap_err().code(),
            "invalid_url",
            "{bad}"
        );
    }
}

#[test]
fn settings_are_checked_and_the_token_never_shows() {
    let mut s = HubSettings::new(
        "http://127.0.0.1:1",
        Token::new("cw_sess_secret123"),
        "sess-1",
    );
    assert!(s.validate().is_ok());
    let shown = format!("{s:?}");
    assert!(!shown.contains("secret123"), "{shown}");
    s.session_id = " ".into();
    assert_eq!(s.validate().unwrap_err().code(), "invalid_session");
    s.session_id = "sess-1".into();
    s.session_token = Token::new("");
    assert_eq!(s.validate().unwrap_err().code(), "invalid_token");
    s.session_token = Token::new("cw_sess_\nx");
    assert_eq!(s.validate().unwrap_err().code(), "invalid_token");
    let h = Token::new("cw_sess_abc").header().unwrap();
    assert!(h.is_sensitive());
    assert_eq!(h.to_str().unwrap(), "Bearer cw_sess_abc");
}

#[test]
fn reconnects_wait_the_public_clients_steps() {
    let t = HubTiming::default();
    let secs: Vec<u64> = (1..=8).map(|n| t.backoff.delay(n).as_secs()).collect();
    assert_eq!(secs, [1, 2, 5, 15, 30, 60, 60, 60]);
}

#[test]
fn status_reads_as_the_issue_words_it() {
    assert_eq!(HubStatus::Online.to_string(), "online");
    assert_eq!(
        HubStatus::Offline {
            reason: CHANNEL_OFFLINE.into()
        }
        .to_string(),
        "offline: Claude Code session is not connected"
    );
    assert_eq!(
        HubStatus::AuthFailed {
            message: "x".into()
        }
        .code(),
        "auth_failed"
    );
}

#[test]
fn rest_answers_are_read_tolerantly() {
    let s = parse_sessions(&json!([
        {"id": "a", "routingName": "@api", "online": true, "extra": 1},
        {"sessionId": "b", "cwd": "/w"},
        {"nope": 1}
    ]))
    .unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].routing_name.as_deref(), Some("@api"));
    assert_eq!(s[0].online, Some(true));
    assert_eq!(s[1].id, "b");
    assert_eq!(s[1].online, None);
    assert_eq!(
        parse_sessions(&json!({"sessions": [{"id": "x"}]}))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        parse_sessions(&json!({"x": 1})).unwrap_err().code(),
        "bad_response"
    );
    assert_eq!(parse_me(&json!({"login": "ana"})).unwrap().login, "ana");
    assert_eq!(
        parse_me(&json!({"user": {"login": "bo", "name": "Bo"}}))
            .unwrap()
            .name
            .as_deref(),
        Some("Bo")
    );
    assert_eq!(parse_me(&json!({})).unwrap_err().code(), "bad_response");
}

#[test]
fn memory_forgets_the_oldest_keys() {
    let mut m = Memory::default();
    assert!(m.insert("a".into()));
    assert!(!m.insert("a".into()));
    for i in 0..MEMORY {
        m.insert(i.to_string());
    }
    assert!(!m.contains("a"));
    assert!(m.contains(&(MEMORY - 1).to_string()));
}

fn settings_for(hub_url: &str) -> HubSettings {
    HubSettings::new(hub_url, Token::new("cw_sess_0123456789abcdef"), "s1")
}

/// One answer to one request (the clients' test server), then the connection is closed.
async fn answering(answer: Vec<u8>) -> u16 {
    crate::net::http::serve_once(answer, Duration::ZERO).await.0
}

#[tokio::test]
async fn rest_reads_fail_in_the_same_words_as_the_socket() {
    // Nothing listens: the REST read and the WebSocket's connection say the same.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let settings = settings_for(&format!("http://127.0.0.1:{port}"));
    let Err(HubError::Network(rest)) = list_sessions(&settings).await else {
        panic!("a network error");
    };
    let url = HubUrl::parse(&settings.hub_url).unwrap();
    let Err(HubError::Network(socket)) = socket::open_stream(&url, Duration::from_secs(2)).await
    else {
        panic!("a network error");
    };
    assert_eq!(rest.code, "connection_refused", "{rest}");
    assert_eq!((rest.code, &rest.message), (socket.code, &socket.message));

    // Refused token, an error status, an answer too large, not JSON.
    let port = answering(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n".to_vec()).await;
    let e = me(&settings_for(&format!("http://127.0.0.1:{port}")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "auth_failed", "{e}");
    let port = answering(b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n".to_vec()).await;
    let e = me(&settings_for(&format!("http://127.0.0.1:{port}")))
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::Status(500)), "{e}");
    let mut big = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
        MAX_REST_BYTES + 1
    )
    .into_bytes();
    big.resize(big.len() + MAX_REST_BYTES + 1, b' ');
    let port = answering(big).await;
    let e = me(&settings_for(&format!("http://127.0.0.1:{port}")))
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::BadResponse(_)), "{e}");
    let port = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nnot".to_vec()).await;
    let e = me(&settings_for(&format!("http://127.0.0.1:{port}")))
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::BadResponse(_)), "{e}");
    let body = br#"{"user":{"login":"ada","name":"Ada"}}"#;
    let mut ok = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    ok.extend_from_slice(body);
    let port = answering(ok).await;
    let who = me(&settings_for(&format!("http://127.0.0.1:{port}")))
        .await
        .unwrap();
    assert_eq!(who.login, "ada");
}
