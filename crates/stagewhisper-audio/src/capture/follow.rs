//! A channel's capture until told to stop ([`run`]), through everything: no server yet, a
//! source that is removed (a headset unplugged) and comes back, a default that changes, a
//! server that restarts, or (the call's audio as one application's sound) that application's
//! streams coming and going ([`super::only_app`]). What happens is reported as [`Event`]s,
//! each new reason for being down once; it never gives up.

use super::conn::{Conn, ConnError};
use super::record::{
    gone, label, record, wait_for_change, Down, Ended, Event, Reporter, RECHECK, TICK,
};
use super::server::locate;
use super::source::{resolve, Source};
use pulseaudio::protocol::{Command, SubscriptionMask};
use stagewhisper_core::audio::{Channel, SourceChoice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Records `choice` for `channel` until `stop` is set, reporting through `on` (on this thread).
/// Never gives up: without a server or a source it waits (notified by the server when it can
/// be, looking again every few seconds otherwise) and reports each new reason once.
pub fn run(
    channel: Channel,
    choice: &SourceChoice,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
) {
    let mut rep = Reporter::new(channel);
    let mut wait = Duration::from_millis(250);
    while !stop.load(Ordering::SeqCst) {
        let conn =
            locate().and_then(|p| Conn::open(&p, &format!("StageWhisper: {}", label(channel))));
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                rep.down(Down::NoServer(e.to_string()), on);
                sleep(stop, wait);
                wait = (wait * 2).min(RECHECK);
                continue;
            }
        };
        wait = Duration::from_millis(250);
        match session(&mut conn, channel, choice, stop, on, &mut rep) {
            Ok(()) => return,
            Err(e) => {
                let why = match e {
                    ConnError::Broken(why) => why,
                    ConnError::Refused(e) => format!("the sound server refused: {e}"),
                };
                rep.down(Down::NoServer(why), on);
                sleep(stop, wait);
            }
        }
    }
}

fn sleep(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(TICK));
    }
}

/// One connection's life: resolve the source, record until it goes, wait for it, again.
fn session(
    conn: &mut Conn,
    channel: Channel,
    choice: &SourceChoice,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
    rep: &mut Reporter,
) -> Result<(), ConnError> {
    conn.ack(Command::Subscribe(
        SubscriptionMask::SOURCE | SubscriptionMask::SINK | SubscriptionMask::SERVER,
    ))?;
    // The source that went, to keep saying it by the name people know.
    let mut lost: Option<Source> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if let SourceChoice::App(app) = choice {
            return super::only_app::session(conn, app, stop, on, rep);
        }
        let sources = conn.sources()?;
        let src = match resolve(channel, choice, &sources) {
            Ok(s) => s,
            Err(why) => {
                let why = match (&lost, choice) {
                    (Some(l), SourceChoice::Named(n)) if &l.name == n => gone(l),
                    _ => why,
                };
                rep.down(Down::NoSource(why), on);
                wait_for_change(conn, stop)?;
                continue;
            }
        };
        match record(conn, &src, choice, channel, stop, on, rep)? {
            Ended::Stop => return Ok(()),
            Ended::Lost(why) => {
                lost = Some(src);
                rep.down(Down::NoSource(why), on)
            }
            Ended::Reopen => {}
        }
    }
}
