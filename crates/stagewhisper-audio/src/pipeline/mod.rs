//! One listening call: per channel, capture → resample → turns → engine, and the finals in
//! order into the transcript.
//!
//! | module | holds |
//! |---|---|
//! | `channel` | `ChannelWorker`: a channel's capture thread (sound server → 16 kHz → turns, its level) and its recognizer thread (each turn to the engine, partials), and the turns that skip a recognizer far behind |
//! | `deliver` | a turn's final into the transcript: stored at once, queued behind the backlog, dropped as an echo; every turn's last event |
//! | `drain` | the backlog's drainer: the waiting turns transcribed and stored in order, retried with a backoff |
//! | `finals` | `Finals`: the order of finals, the turns in flight, the drainer's wake-ups |
//! | `echo` | the echo check: a "You" final that is the call's audio heard by the microphone (its level envelope, or its words) |
//! | `shared` | `Shared`: what every thread reaches, and the service with it (the context, the backlog, the finals, the levels, the state, the engine; turns stored, calls looked up) |
//! | `status` | the state the service and the threads keep, and the status built from it in plain words |
//!
//! Every thread runs off the async runtime's workers; nothing waits on the engine but the
//! recognizers and the drainer. `Finals` keeps the transcript in order: a final is stored at
//! once only when no earlier turn waits in the backlog; otherwise it queues behind (its text
//! kept, its audio not). The drainer transcribes the backlog in order with whatever engine is
//! current and stores each turn exactly once.
//!
//! The service (`crate::service`) stands above: it starts and stops the channels and the
//! drainer, and nothing here reaches back up to it.

mod channel;
mod deliver;
mod drain;
mod echo;
mod finals;
mod shared;
mod status;

pub use channel::{MAX_QUEUED_SECONDS, PARTIAL_EVERY};
pub use echo::ECHO_HOLD;

pub(crate) use channel::ChannelWorker;
pub(crate) use drain::drain;
pub(crate) use shared::Shared;
pub(crate) use status::{capitalise, channel_words, engine_words, lower_first, ChannelState};
