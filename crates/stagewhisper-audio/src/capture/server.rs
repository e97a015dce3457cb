//! Where the sound server is, or why there is none (in plain words), and the authentication
//! cookie a client presents to it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why the sound server cannot be used, in plain words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// No sound server could be reached.
    #[error("{0}")]
    Unavailable(String),
    /// The server answered something unexpected, refused a request or stopped answering.
    #[error("{0}")]
    Server(String),
}

/// The socket of the sound server, or why there is none (in plain words). Looks where libpulse
/// does: `PULSE_SERVER` (`unix:PATH` or a path; several may be given, separated by spaces),
/// then `$PULSE_RUNTIME_PATH/native`, `$XDG_RUNTIME_DIR/pulse/native`,
/// `/run/user/<uid>/pulse/native` and the system-wide `/var/run/pulse/native`. PipeWire's pulse
/// server listens at the same places.
pub fn locate() -> Result<PathBuf, CaptureError> {
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    locate_in(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()), uid)
}

fn locate_in(
    env: &dyn Fn(&str) -> Option<String>,
    uid: Option<u32>,
) -> Result<PathBuf, CaptureError> {
    if let Some(list) = env("PULSE_SERVER") {
        let mut remote = Vec::new();
        let mut tried = Vec::new();
        for entry in list.split_whitespace() {
            // `{machine-id}unix:/path`: the prefix names the machine the entry is for.
            let entry = match entry.strip_prefix('{') {
                Some(rest) => rest.split_once('}').map_or(rest, |(_, e)| e),
                None => entry,
            };
            let path = match entry.strip_prefix("unix:") {
                Some(p) => PathBuf::from(p),
                None if entry.starts_with('/') => PathBuf::from(entry),
                None => {
                    remote.push(entry.to_string());
                    continue;
                }
            };
            if is_socket(&path) {
                return Ok(path);
            }
            tried.push(path.display().to_string());
        }
        return Err(CaptureError::Unavailable(if tried.is_empty() {
            format!(
                "PULSE_SERVER names a network sound server ({}); this app records from a sound \
                 server on this computer only",
                remote.join(", ")
            )
        } else {
            format!(
                "no sound server is listening at {} (from PULSE_SERVER)",
                tried.join(", ")
            )
        }));
    }
    let mut candidates = Vec::new();
    if let Some(p) = env("PULSE_RUNTIME_PATH") {
        candidates.push(PathBuf::from(p).join("native"));
    }
    match env("XDG_RUNTIME_DIR") {
        Some(p) => candidates.push(PathBuf::from(p).join("pulse/native")),
        None => {
            if let Some(uid) = uid {
                candidates.push(PathBuf::from(format!("/run/user/{uid}/pulse/native")));
            }
        }
    }
    candidates.push(PathBuf::from("/var/run/pulse/native"));
    if let Some(found) = candidates.iter().find(|p| is_socket(p)) {
        return Ok(found.clone());
    }
    Err(CaptureError::Unavailable(format!(
        "no sound server is running (PulseAudio or PipeWire): nothing listens at {}",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    )))
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

/// The length of a cookie in the protocol's `AUTH` command: the server reads exactly this many
/// bytes and kicks a client that sends fewer, even when it accepts anyone (`auth-anonymous`).
const COOKIE_LENGTH: usize = 256;

/// The authentication cookie, where libpulse looks for it (PipeWire needs none). Without one
/// (a user who never ran a libpulse client, a fresh machine), zeros of the right length: a
/// server that accepts anonymous clients (PipeWire, `auth-anonymous=1`, the system server's
/// group check) lets the app in; one that wants the cookie refuses it in plain words.
pub(super) fn cookie() -> Vec<u8> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut paths: Vec<PathBuf> = std::env::var_os("PULSE_COOKIE")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Some(h) = home {
        paths.push(h.join(".config/pulse/cookie"));
        paths.push(h.join(".pulse-cookie"));
    }
    paths
        .iter()
        .find_map(|p| std::fs::read(p).ok().filter(|c| c.len() == COOKIE_LENGTH))
        .unwrap_or_else(|| vec![0; COOKIE_LENGTH])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn socket_in(dir: &Path, rel: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        // A bound listener is a socket on disk; kept alive by leaking it for the test.
        std::mem::forget(std::os::unix::net::UnixListener::bind(&p).unwrap());
        p
    }

    #[test]
    fn the_server_is_found_where_libpulse_looks() {
        let dir = tempfile::tempdir().unwrap();
        let xdg = socket_in(dir.path(), "xdg/pulse/native");
        let runtime = socket_in(dir.path(), "runtime/native");
        let direct = socket_in(dir.path(), "direct.sock");
        let d = dir.path().display().to_string();
        // PULSE_SERVER first, with a machine prefix and a dead entry before the live one.
        let server = format!("{{abc}}unix:{d}/nothing unix:{}", direct.display());
        assert_eq!(
            locate_in(
                &env(&[
                    ("PULSE_SERVER", &server),
                    ("XDG_RUNTIME_DIR", &format!("{d}/xdg"))
                ]),
                None
            )
            .unwrap(),
            direct
        );
        assert_eq!(
            locate_in(
                &env(&[
                    ("PULSE_RUNTIME_PATH", &format!("{d}/runtime")),
                    ("XDG_RUNTIME_DIR", &format!("{d}/xdg"))
                ]),
                None
            )
            .unwrap(),
            runtime
        );
        assert_eq!(
            locate_in(&env(&[("XDG_RUNTIME_DIR", &format!("{d}/xdg"))]), None).unwrap(),
            xdg
        );
        // A plain file is not a server.
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let e = locate_in(&env(&[("PULSE_SERVER", &format!("{d}/file"))]), None).unwrap_err();
        assert!(
            e.to_string().contains("no sound server is listening at"),
            "{e}"
        );
        let e = locate_in(&env(&[("PULSE_SERVER", "tcp:10.0.0.2:4713")]), None).unwrap_err();
        assert!(e.to_string().contains("network sound server"), "{e}");
        let e = locate_in(&env(&[("XDG_RUNTIME_DIR", &format!("{d}/none"))]), None).unwrap_err();
        assert!(
            e.to_string().starts_with("no sound server is running")
                && e.to_string().contains(&format!("{d}/none/pulse/native")),
            "{e}"
        );
    }
}
