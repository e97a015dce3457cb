//! The one runtime where the HTTP requests of blocking callers run.
//!
//! The speech engines and the model downloads run on threads of their own, never on the app's
//! async workers: an engine is called from the audio pipeline's thread (and from the command
//! line and the benches, where there is no runtime at all), and a download writes and hashes
//! hundreds of megabytes as they arrive. Their requests are async (reqwest, the shared client
//! set-up of [`crate::net::http`]) so that a request can really be abandoned (a partial
//! transcription nobody waits for any more, a download the person cancelled), and that needs a
//! runtime. Rather than each caller starting one of its own, they share this one: one worker
//! thread (`sw-net`), started on first use and kept for the life of the process (it is never
//! dropped, so no caller ever has to shut a runtime down from an async thread).
//!
//! - [`handle`] to spawn a request and wait for its answer on a channel;
//! - [`block_on`] to run a future on the calling thread (its timers and sockets are driven by
//!   the shared worker). Like any `block_on`, never from an async worker.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use tokio::runtime::{Builder, Handle, Runtime};

/// The worker threads' name.
pub const THREAD_NAME: &str = "sw-net";

/// The shared runtime's handle, starting it the first time (an error only when the operating
/// system refuses a thread or an event queue).
pub fn handle() -> std::io::Result<Handle> {
    static RT: OnceLock<Runtime> = OnceLock::new();
    static START: Mutex<()> = Mutex::new(());
    if let Some(rt) = RT.get() {
        return Ok(rt.handle().clone());
    }
    // One start at a time: a runtime started by a losing racer would have to be dropped, and
    // dropping one panics on an async thread.
    let _one = START.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rt) = RT.get() {
        return Ok(rt.handle().clone());
    }
    let rt = Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()?;
    Ok(RT.get_or_init(|| rt).handle().clone())
}

/// Runs `fut` to its end on the calling thread, with the shared runtime's timers and I/O.
/// Panics when called from an async worker (as every `block_on` does).
pub fn block_on<F: Future>(fut: F) -> std::io::Result<F::Output> {
    Ok(handle()?.block_on(fut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_runtime_for_every_caller_from_any_thread() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let worker = handle().unwrap().spawn(async {
                        let t = std::thread::current();
                        (t.id(), t.name().map(str::to_string))
                    });
                    block_on(worker).unwrap().unwrap()
                })
            })
            .collect();
        let seen: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // One worker thread in all: one runtime, whoever asked first.
        assert!(seen.iter().all(|(id, _)| *id == seen[0].0), "{seen:?}");
        assert!(seen.iter().all(|(_, n)| n.as_deref() == Some(THREAD_NAME)));
        // Timers and sockets work from a thread that has no runtime of its own.
        let slept = block_on(async {
            let t = tokio::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(20)).await;
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            (t.elapsed(), l.local_addr().unwrap().port())
        })
        .unwrap();
        assert!(slept.0 >= Duration::from_millis(20) && slept.1 > 0);
    }

    /// As the audio crate uses it: a blocking thread, the shared client set-up for https (no TLS
    /// feature of reqwest's own: the app's rustls configuration), the shared runtime. The
    /// request goes out as TLS (its first byte is a handshake record) and a server that does
    /// not answer in TLS fails at the TLS step.
    #[test]
    fn an_https_request_from_a_blocking_thread_speaks_the_apps_tls() {
        use crate::net::connect::ConnectError;
        use crate::net::http;
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut first = [0u8; 1];
            s.read_exact(&mut first).unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
            first[0]
        });
        let connect = Duration::from_secs(5);
        let client = http::https_builder(connect).build().unwrap();
        let err = block_on(client.get(format!("https://localhost:{port}/")).send())
            .unwrap()
            .unwrap_err();
        assert_eq!(server.join().unwrap(), 0x16, "a TLS handshake record");
        assert!(
            matches!(
                http::connect_error(&err, connect),
                Some(ConnectError::Tls(_))
            ),
            "{err:?}"
        );
    }
}
