//! BYO envelope benchmark (not a test): seal + open throughput of the real crypto module
//! (XChaCha20-Poly1305 with the AAD of each dialect, standard base64) for 1 KiB and 64 KiB
//! payloads, and the cost of one key agreement (X25519 + HKDF-SHA256).
//!
//! `cargo bench -p stagewhisper-core --bench byo_seal_open [-- --secs 1 --rounds 5]`
//!
//! Each row is the median of `--rounds` rounds of `--secs` seconds each.

use stagewhisper_core::assistants::kinds::byo_relay::crypto::{
    content_type, Dialect, EnvelopeKey, KeyPair, Meta,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn args() -> (f64, usize) {
    let v: Vec<String> = std::env::args().collect();
    let (mut secs, mut rounds) = (1.0, 5);
    let mut i = 1;
    while i < v.len() {
        match v[i].as_str() {
            "--secs" => {
                secs = v[i + 1].parse().expect("--secs N");
                i += 1;
            }
            "--rounds" => {
                rounds = v[i + 1].parse().expect("--rounds N");
                i += 1;
            }
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    (secs, rounds)
}

/// Runs `f` for about `secs`; returns operations per second.
fn rate(secs: f64, mut f: impl FnMut()) -> f64 {
    let budget = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..16 {
            f();
        }
        n += 16;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let (secs, rounds) = args();
    let desktop = KeyPair::generate();
    let plugin = KeyPair::generate();
    let dk = EnvelopeKey::derive(&desktop, &plugin.public_bytes()).unwrap();
    let pk = EnvelopeKey::derive(&plugin, &desktop.public_bytes()).unwrap();
    let meta = Meta {
        session_id: "insights:6f1c2a4e-9d0b-4e55-8d1f-0c3b7a9e2d10",
        correlation_id: "job:3b0f8a1e-5c2d-4f7a-9e6b-1d2c3b4a5f60",
        content_type: content_type::REASONING_INPUT,
    };
    println!("byo_seal_open: {rounds} rounds x {secs} s, median");
    for size in [1024usize, 64 * 1024] {
        let payload: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
        for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
            let ops = median(
                (0..rounds)
                    .map(|_| {
                        rate(secs, || {
                            let env = dk.seal(&meta, black_box(&payload));
                            let out = pk.open_from(&env, dialect, "desktop").unwrap();
                            black_box(out);
                        })
                    })
                    .collect(),
            );
            println!(
                "  {:>6} B {:<8}  seal+open {:>10.0} /s  {:>8.1} MiB/s  ({:.1} us each)",
                size,
                format!("{dialect:?}"),
                ops,
                ops * size as f64 / (1024.0 * 1024.0),
                1e6 / ops
            );
        }
    }
    let ka = median(
        (0..rounds)
            .map(|_| {
                rate(secs, || {
                    black_box(EnvelopeKey::derive(&desktop, &plugin.public_bytes()).unwrap());
                })
            })
            .collect(),
    );
    println!(
        "  key agreement (X25519 + HKDF) {ka:>10.0} /s  ({:.1} us each)",
        1e6 / ka
    );
}
