//! A [`Source`] of the sound server, the order sources are listed in, and what a channel's
//! choice means among them ([`resolve`]).

use stagewhisper_core::audio::{Channel, SourceChoice, SourceKind, SourceView};

/// A source of the sound server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The server's index (changes when the device comes back).
    pub index: u32,
    pub name: String,
    pub description: String,
    pub kind: SourceKind,
    /// The default source (a microphone) or the monitor of the default output (a monitor).
    pub is_default: bool,
    /// Its native sample rate: what the app records at.
    pub rate: u32,
}

impl Source {
    pub fn view(&self) -> SourceView {
        SourceView {
            name: self.name.clone(),
            description: self.description.clone(),
            kind: self.kind,
            is_default: self.is_default,
        }
    }
}

/// Microphones first, then monitors; the default first within each; then by description.
pub(super) fn order(mut v: Vec<Source>) -> Vec<Source> {
    v.sort_by(|a, b| {
        let key = |s: &Source| (s.kind == SourceKind::Monitor, !s.is_default);
        key(a)
            .cmp(&key(b))
            .then_with(|| {
                a.description
                    .to_lowercase()
                    .cmp(&b.description.to_lowercase())
            })
            .then_with(|| a.name.cmp(&b.name))
    });
    v
}

/// The source a channel's choice means, or why there is none (in plain words).
///
/// `"default"` is the server's default source for the microphone (unless that is the monitor
/// of an output, as on a machine with no microphone: then there is none) and the monitor of the
/// server's default output for the call's audio.
pub fn resolve(
    channel: Channel,
    choice: &SourceChoice,
    sources: &[Source],
) -> Result<Source, String> {
    match choice {
        SourceChoice::Off => Err("off".into()),
        SourceChoice::App(app) => Err(format!(
            "“{app}”'s own sound is heard while listening to a call, not as a source of its own"
        )),
        SourceChoice::Named(name) => sources
            .iter()
            .find(|s| &s.name == name)
            .cloned()
            .ok_or_else(|| format!("the source “{name}” is not there (unplugged or removed)")),
        SourceChoice::Default => {
            let want = match channel {
                Channel::Mic => SourceKind::Microphone,
                Channel::System => SourceKind::Monitor,
            };
            sources
                .iter()
                .find(|s| s.is_default && s.kind == want)
                .cloned()
                .ok_or_else(|| match channel {
                    Channel::Mic => {
                        "there is no microphone (the sound server has no default input)".to_string()
                    }
                    Channel::System => {
                        "there is no output device to take the call's audio from (the sound \
                         server has no default output)"
                            .to_string()
                    }
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(name: &str, kind: SourceKind, is_default: bool) -> Source {
        Source {
            index: 0,
            name: name.into(),
            description: format!("{name} device"),
            kind,
            is_default,
            rate: 48_000,
        }
    }

    #[test]
    fn default_means_the_default_input_and_the_monitor_of_the_default_output() {
        let list = order(vec![
            src("call.monitor", SourceKind::Monitor, true),
            src("usb", SourceKind::Microphone, false),
            src("mic", SourceKind::Microphone, true),
            src("hdmi.monitor", SourceKind::Monitor, false),
        ]);
        let names: Vec<_> = list.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mic", "usb", "call.monitor", "hdmi.monitor"]);
        assert_eq!(
            resolve(Channel::Mic, &SourceChoice::Default, &list)
                .unwrap()
                .name,
            "mic"
        );
        assert_eq!(
            resolve(Channel::System, &SourceChoice::Default, &list)
                .unwrap()
                .name,
            "call.monitor"
        );
        assert_eq!(
            resolve(
                Channel::Mic,
                &SourceChoice::Named("hdmi.monitor".into()),
                &list
            )
            .unwrap()
            .name,
            "hdmi.monitor"
        );
        let e = resolve(Channel::Mic, &SourceChoice::Named("headset".into()), &list).unwrap_err();
        assert!(e.contains("“headset” is not there"), "{e}");
        // No microphone: the default input being a monitor does not make it one.
        let only_monitors = vec![src("call.monitor", SourceKind::Monitor, true)];
        let e = resolve(Channel::Mic, &SourceChoice::Default, &only_monitors).unwrap_err();
        assert!(e.contains("no microphone"), "{e}");
    }
}
