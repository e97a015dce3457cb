//! ngrok, in process (the `ngrok` crate on `ring`): one session, one HTTP endpoint, every
//! connection forwarded byte for byte to the callback listener (never the UI listener).
//!
//! The crate has no timeout of its own (a network that drops packets hangs `connect()` for
//! minutes) and reconnects on its own with a backoff that grows to minutes. So: every network
//! step of our connector has a timeout, the whole connect + bind has one more, and the
//! connector refuses the crate's own reconnects (`ConnectError::Canceled`), which ends the
//! tunnel's stream; the [`super::TunnelManager`] then reports the loss and reconnects with its
//! own backoff.

use super::net::{self, Failure};
use futures_util::TryStreamExt;
use ngrok::config::TunnelBuilder;
use ngrok::session::{ConnectError, IoStream, RpcError};
use ngrok::tunnel::{AcceptError, EndpointInfo, HttpTunnel, TunnelInfo};
use ngrok::Error as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_rustls::rustls::ClientConfig;

/// Where and how to reach the ngrok service.
#[derive(Clone)]
pub struct NgrokParams {
    pub authtoken: String,
    /// A reserved domain (`desk.example.app`), so the URL survives restarts.
    pub domain: Option<String>,
    /// `host:port` of the ngrok service; `None` = the crate's default. Tests point it at
    /// loopback.
    pub server_addr: Option<String>,
    /// TLS to the service (always, except for a fake service in tests).
    pub tls: bool,
    /// Each of DNS, TCP connect, TLS handshake.
    pub step_timeout: Duration,
    /// Session heartbeat (interval, tolerance); `None` = the crate's (10 s, 15 s).
    pub heartbeat: Option<(Duration, Duration)>,
    /// The callback listener's URL (shown in the ngrok dashboard as the upstream).
    pub forwards_to: String,
}

impl std::fmt::Debug for NgrokParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NgrokParams")
            .field("authtoken_set", &!self.authtoken.is_empty())
            .field("domain", &self.domain)
            .field("server_addr", &self.server_addr)
            .field("tls", &self.tls)
            .field("forwards_to", &self.forwards_to)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Resolving,
    Connecting,
    Tls,
    LoggingIn,
    Binding,
}

#[derive(Debug, Default)]
struct Diag {
    phase: Phase,
    failure: Option<Failure>,
    /// Why the session went down (the error the crate passed to its reconnect).
    lost: Option<String>,
}

type SharedDiag = Arc<Mutex<Diag>>;

fn set_phase(d: &SharedDiag, p: Phase) {
    d.lock().expect("diag lock").phase = p;
}

/// An error and its sources, `: `-joined.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Removes the authtoken from text that came from the server (ngrok echoes it in some
/// errors).
fn redact(text: &str, token: &str) -> String {
    if token.len() >= 4 {
        text.replace(token, "****")
    } else {
        text.to_string()
    }
}

fn server_display(p: &NgrokParams) -> String {
    p.server_addr
        .clone()
        .unwrap_or_else(|| "the ngrok service".to_string())
}

/// A running tunnel.
pub struct NgrokTunnel {
    session: ngrok::Session,
    tunnel: HttpTunnel,
    diag: SharedDiag,
    /// The public URL ngrok assigned (`https://…`).
    pub url: String,
}

impl std::fmt::Debug for NgrokTunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NgrokTunnel")
            .field("url", &self.url)
            .finish()
    }
}

/// Connects, logs in and binds the HTTP endpoint, all within `total`.
pub async fn open(p: &NgrokParams, total: Duration) -> Result<NgrokTunnel, Failure> {
    if p.authtoken.trim().is_empty() {
        return Err(no_authtoken());
    }
    let diag: SharedDiag = Arc::default();
    match tokio::time::timeout(total, open_inner(p, diag.clone())).await {
        Ok(r) => r,
        Err(_) => {
            let d = diag.lock().expect("diag lock");
            if let Some(f) = &d.failure {
                return Err(f.clone());
            }
            let during = match d.phase {
                Phase::Resolving => "resolving its name (DNS)",
                Phase::Connecting => "connecting",
                Phase::Tls => "the TLS handshake",
                Phase::LoggingIn => "the login",
                Phase::Binding => "opening the endpoint",
            };
            Err(Failure::new(
                "timeout",
                format!(
                    "No answer from {} within {} s (stuck in {during}): the network may be down, or a firewall drops the traffic. Retrying.",
                    server_display(p),
                    total.as_secs()
                ),
            ))
        }
    }
}

pub fn no_authtoken() -> Failure {
    Failure::permanent(
        "no_authtoken",
        "No ngrok authtoken: paste it in Settings → Tunnel (ngrok dashboard → Your Authtoken), or start StageWhisper with NGROK_AUTHTOKEN set.",
    )
}

async fn dial(
    host: &str,
    port: u16,
    tls_config: Arc<ClientConfig>,
    p: &NgrokParams,
    diag: &SharedDiag,
) -> Result<Box<dyn IoStream>, Failure> {
    let what = "the ngrok service";
    set_phase(diag, Phase::Resolving);
    let addrs = net::resolve(host, port, p.step_timeout, what).await?;
    set_phase(diag, Phase::Connecting);
    let display = format!("{host}:{port}");
    let tcp = net::connect(&addrs, &display, p.step_timeout, what).await?;
    if !p.tls {
        return Ok(Box::new(tcp));
    }
    set_phase(diag, Phase::Tls);
    let s = net::tls(
        tls_config,
        host,
        tcp,
        p.step_timeout,
        what,
        "Is a proxy or firewall intercepting HTTPS on this network?",
    )
    .await?;
    Ok(Box::new(s))
}

async fn open_inner(p: &NgrokParams, diag: SharedDiag) -> Result<NgrokTunnel, Failure> {
    let mut b = ngrok::Session::builder();
    b.authtoken(p.authtoken.clone()).client_info(
        "stagewhisper",
        env!("CARGO_PKG_VERSION"),
        None::<String>,
    );
    if let Some(addr) = &p.server_addr {
        b.server_addr(addr.clone()).map_err(|e| {
            Failure::permanent(
                "invalid_server",
                format!("Invalid ngrok server address: {e}"),
            )
        })?;
    }
    if let Some((interval, tolerance)) = p.heartbeat {
        let bad = |_| Failure::permanent("invalid_server", "invalid heartbeat setting");
        b.heartbeat_interval(interval).map_err(bad)?;
        b.heartbeat_tolerance(tolerance)
            .map_err(|_| Failure::permanent("invalid_server", "invalid heartbeat setting"))?;
    }
    let params = p.clone();
    let d = diag.clone();
    b.connector(
        move |host: String, port: u16, cfg: Arc<ClientConfig>, err: Option<AcceptError>| {
            let params = params.clone();
            let d = d.clone();
            async move {
                if let Some(e) = err {
                    // The session went down: let the manager reconnect on its own terms.
                    d.lock().expect("diag lock").lost = Some(chain(&e));
                    return Err(ConnectError::Canceled);
                }
                match dial(&host, port, cfg, &params, &d).await {
                    Ok(io) => {
                        set_phase(&d, Phase::LoggingIn);
                        Ok(io)
                    }
                    Err(f) => {
                        let msg = f.message.clone();
                        d.lock().expect("diag lock").failure = Some(f);
                        Err(ConnectError::Tcp(std::io::Error::other(msg)))
                    }
                }
            }
        },
    );
    let session = b.connect().await.map_err(|e| {
        let recorded = diag.lock().expect("diag lock").failure.take();
        recorded.unwrap_or_else(|| classify_connect(&e, p))
    })?;
    set_phase(&diag, Phase::Binding);
    let mut ep = session.http_endpoint();
    ep.forwards_to(p.forwards_to.clone());
    if let Some(d) = &p.domain {
        ep.domain(d.clone());
    }
    let tunnel = ep
        .listen()
        .await
        .map_err(|e| classify_rpc(&e, p, "endpoint"))?;
    let url = tunnel.url().to_string();
    Ok(NgrokTunnel {
        session,
        tunnel,
        diag,
        url,
    })
}

fn classify_connect(e: &ConnectError, p: &NgrokParams) -> Failure {
    match e {
        ConnectError::Auth(rpc) => classify_rpc(rpc, p, "login"),
        ConnectError::Start(_) => Failure::new(
            "protocol_error",
            format!(
                "The ngrok session did not start ({}). Retrying.",
                redact(&chain(e), &p.authtoken)
            ),
        ),
        _ => Failure::new(
            "ngrok_error",
            format!("ngrok: {}. Retrying.", redact(&chain(e), &p.authtoken)),
        ),
    }
}

/// Maps an ngrok RPC error (login or bind) to a failure a person understands.
fn classify_rpc(e: &RpcError, p: &NgrokParams, step: &str) -> Failure {
    let domain = p.domain.as_deref().unwrap_or("the domain");
    let Some(code) = e.error_code() else {
        return match e {
            RpcError::Response(_) => Failure::new(
                "ngrok_refused",
                format!(
                    "ngrok refused the {step}: {}. Retrying.",
                    redact(&e.msg(), &p.authtoken)
                ),
            ),
            _ => Failure::new(
                "protocol_error",
                format!(
                    "{} closed the connection during the {step} ({}): not an ngrok service, or a proxy in between? Retrying.",
                    server_display(p),
                    redact(&chain(e), &p.authtoken)
                ),
            ),
        };
    };
    let code_up = code.to_ascii_uppercase();
    let n = code_up.trim_start_matches("ERR_NGROK_");
    match n {
        "105" | "106" | "107" => Failure::permanent(
            "bad_authtoken",
            format!(
                "ngrok rejected the authtoken ({code_up}): it is mistyped, was reset, or was revoked. Copy the current one from the ngrok dashboard (Your Authtoken) into Settings → Tunnel."
            ),
        ),
        "4018" => Failure::permanent(
            "account_required",
            format!(
                "ngrok needs a verified account and its authtoken ({code_up}): sign up, verify the e-mail address, then paste the account's authtoken."
            ),
        ),
        "320" | "7117" | "7118" | "414" => Failure::permanent(
            "domain_not_reserved",
            format!(
                "The domain {domain} is not reserved for this ngrok account ({code_up}): reserve it in the ngrok dashboard (Domains) of the account this authtoken belongs to, or clear the domain to use the account's default URL."
            ),
        ),
        "401" => Failure::permanent(
            "domain_not_allowed",
            format!(
                "This ngrok plan cannot use the domain {domain} ({code_up}): clear the domain to use the account's default URL."
            ),
        ),
        "334" => Failure::new(
            "domain_in_use",
            format!(
                "{domain} is already online in another ngrok agent ({code_up}): stop the other agent (or StageWhisper on another computer). Retrying."
            ),
        ),
        "108" | "348" => Failure::new(
            "session_limit",
            format!(
                "This ngrok account already runs as many agents as its plan allows ({code_up}): stop the other ngrok agent. Retrying."
            ),
        ),
        "120" | "121" => Failure::permanent(
            "agent_outdated",
            format!("ngrok no longer accepts this agent version ({code_up}): update StageWhisper."),
        ),
        _ => Failure::new(
            "ngrok_refused",
            format!(
                "ngrok refused the {step} ({code_up}): {}. Retrying.",
                redact(&e.msg(), &p.authtoken)
            ),
        ),
    }
}

impl NgrokTunnel {
    /// Forwards every connection to `local` until the tunnel goes down; returns why.
    pub async fn serve(&mut self, local: SocketAddr) -> Failure {
        loop {
            match self.tunnel.try_next().await {
                Ok(Some(mut conn)) => {
                    tokio::spawn(async move {
                        match tokio::net::TcpStream::connect(local).await {
                            Ok(mut upstream) => {
                                let _ = upstream.set_nodelay(true);
                                if let Err(e) =
                                    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await
                                {
                                    tracing::debug!(error = %e, "tunnelled connection ended with an error");
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot reach the callback listener for a tunnelled connection")
                            }
                        }
                    });
                }
                Ok(None) => {
                    return Failure::new(
                        "connection_lost",
                        "ngrok closed the tunnel. Reconnecting.",
                    )
                }
                Err(e) => {
                    let why = self
                        .diag
                        .lock()
                        .expect("diag lock")
                        .lost
                        .take()
                        .unwrap_or_else(|| chain(&e));
                    return Failure::new(
                        "connection_lost",
                        format!("Lost the connection to ngrok ({why}). Reconnecting."),
                    );
                }
            }
        }
    }

    /// Closes the session politely (bounded).
    pub async fn close(mut self) {
        let id = self.tunnel.id().to_string();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let _ = self.session.close_tunnel(&id).await;
            let _ = self.session.close().await;
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_carries_the_token() {
        let p = NgrokParams {
            authtoken: "tok-secret-123".into(),
            domain: None,
            server_addr: None,
            tls: true,
            step_timeout: Duration::from_secs(1),
            heartbeat: None,
            forwards_to: "http://127.0.0.1:1".into(),
        };
        assert!(!format!("{p:?}").contains("tok-secret-123"));
    }

    #[test]
    fn server_text_never_carries_the_token() {
        assert_eq!(
            redact("Your authtoken: abcd1234 is invalid", "abcd1234"),
            "Your authtoken: **** is invalid"
        );
    }
}
