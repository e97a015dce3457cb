//! The provider registry (data only): every assistant kind, and every real peer each kind
//! serves, with how to install and set it up, the peer versions StageWhisper is tested with
//! and the versions known to be bad. `GET /api/providers` serves it; Settings → Assistant is
//! built from it. The kinds are the list's ([`super::kinds::BUILT_IN`], which serves both:
//! [`super::kinds::registry`]); this file holds the peers.

use serde::Serialize;

/// A peer version StageWhisper is tested with.
#[derive(Debug, Clone, Serialize)]
pub struct Tested {
    /// The package (or program) the version is of.
    pub package: &'static str,
    /// The exact version tested.
    pub version: &'static str,
    /// Versions treated as tested: this prefix (`0.43.` = any 0.43 patch release).
    pub series: &'static str,
}

/// A version known not to work, with what goes wrong.
#[derive(Debug, Clone, Serialize)]
pub struct KnownBad {
    pub package: &'static str,
    /// A version prefix (`2026.9.` = every 2026.9 release).
    pub versions: &'static str,
    pub warning: &'static str,
}

/// One real peer served by a kind.
#[derive(Debug, Clone, Serialize)]
pub struct Provider {
    pub id: &'static str,
    pub kind: &'static str,
    pub name: &'static str,
    pub available: bool,
    /// A command to run on the assistant's machine.
    pub install: &'static str,
    /// Set-up / pairing steps, plain sentences in order.
    pub setup: &'static [&'static str],
    pub tested_with: &'static [Tested],
    pub known_bad: &'static [KnownBad],
}

const HERMES_AGENT: Tested = Tested {
    package: "hermes-agent",
    version: "0.19.0",
    series: "0.19.",
};

static PROVIDERS: &[Provider] = &[
    Provider {
        id: "hermes-adapter",
        kind: "incoming",
        name: "Hermes Agent (StageWhisper adapter)",
        available: true,
        install: "pip install 'hermes-agent>=0.19,<0.20' 'hermes-platform-stagewhisper>=0.43,<0.44' && stagewhisper-hermes-install",
        setup: &[
            "Install the adapter next to Hermes Agent, then run stagewhisper-hermes-install to add the plugin.",
            "Enable the plugin in the Hermes config: plugins: {enabled: [stagewhisper]}.",
            "In Hermes' .env set STAGEWHISPER_RELAY_TOKEN to a random token of at least 32 characters, STAGEWHISPER_LISTEN_PORT to a free port, and STAGEWHISPER_ALLOW_ALL_USERS=1.",
            "Start it with: hermes gateway run.",
            "Here, enter http://127.0.0.1:<port> as the base URL and the same relay token, then save.",
        ],
        tested_with: &[
            Tested {
                package: "hermes-platform-stagewhisper",
                version: "0.43.0",
                series: "0.43.",
            },
            HERMES_AGENT,
        ],
        known_bad: &[],
    },
    Provider {
        id: "openclaw-channel-http",
        kind: "incoming",
        name: "OpenClaw (StageWhisper channel, http transport)",
        available: true,
        install: "openclaw plugins install @stagewhisper/stagewhisper@0.64.0",
        setup: &[
            "Install the StageWhisper channel plugin into OpenClaw.",
            "In the OpenClaw config set plugins.entries.stagewhisper.config to {transport: \"http\", httpHost: \"127.0.0.1\", httpPort: <a free port>, httpToken: <a token of at least 16 characters>}.",
            "Also set channels.stagewhisper (apiBaseUrl, integrationId, relayToken): without it the listener never starts.",
            "Here, enter http://127.0.0.1:<httpPort> as the base URL and the httpToken as the relay token, then save.",
        ],
        tested_with: &[
            Tested {
                package: "@stagewhisper/stagewhisper",
                version: "0.64.0",
                series: "0.64.",
            },
            Tested {
                package: "openclaw",
                version: "2026.3.23",
                series: "2026.3.23",
            },
        ],
        known_bad: &[KnownBad {
            package: "openclaw",
            versions: "2026.9.",
            warning: "With OpenClaw 2026.9.x the channel's http transport accepts every message but every task ends in an error and no reply arrives. Use OpenClaw 2026.3.23.",
        }],
    },
    Provider {
        id: "hermes-byo-plugin",
        kind: "byo",
        name: "Hermes Agent (StageWhisper BYO relay plugin)",
        available: true,
        install: "pip install 'hermes-agent>=0.19,<0.20' 'hermes-plugin-stagewhisper>=0.29,<0.30'",
        setup: &[
            "Install the BYO relay plugin next to Hermes Agent.",
            "Here, choose BYO relay and create a pairing code (valid 10 minutes, once).",
            "On the assistant's computer run the shown command: stagewhisper-hermes pair --code <code> --api-url <this app's callback URL>.",
            "Start Hermes with: hermes gateway run. The plugin keeps a job stream open to this app; everything is end-to-end encrypted.",
        ],
        tested_with: &[
            Tested {
                package: "hermes-plugin-stagewhisper",
                version: "0.29.0",
                series: "0.29.",
            },
            HERMES_AGENT,
        ],
        known_bad: &[],
    },
    Provider {
        id: "openclaw-channel-sse",
        kind: "byo",
        name: "OpenClaw (StageWhisper channel, sse transport)",
        available: true,
        install: "openclaw plugins install @stagewhisper/stagewhisper@0.64.0",
        setup: &[
            "Install the StageWhisper channel plugin into OpenClaw.",
            "Keep plugins.entries.stagewhisper.config.transport at \"sse\" (the default) and enable gateway.http.endpoints.responses.",
            "Here, choose BYO relay and create a pairing code; run the shown command: openclaw stagewhisper pair --code <code> --api-url <this app's callback URL>.",
            "On OpenClaw 2026.9.x the pair command crashes after pairing: paste the config block shown here instead, with default as the only agent.",
        ],
        tested_with: &[Tested {
            package: "@stagewhisper/stagewhisper",
            version: "0.64.0",
            series: "0.64.",
        }],
        known_bad: &[],
    },
    Provider {
        id: "openclaw-gateway",
        kind: "openclaw-gateway",
        name: "OpenClaw Gateway",
        available: true,
        install: "npm install -g openclaw@2026.9.6",
        setup: &[
            "Start the gateway: openclaw gateway.",
            "Here, enter the gateway's WebSocket URL and token.",
            "A device on another machine must be approved once on the gateway: openclaw devices approve.",
        ],
        tested_with: &[Tested {
            package: "openclaw",
            version: "2026.9.6 (gateway protocol 4)",
            series: "2026.9.",
        }],
        known_bad: &[],
    },
    Provider {
        id: "clawborrator",
        kind: "clawborrator",
        name: "clawborrator hub",
        available: true,
        install: "",
        setup: &[
            "Start Claude Code with the clawborrator channel so its session shows on the hub.",
            "Here, enter the hub's URL (https://, or http:// to this computer) and your session token (cw_sess_…).",
            "Pick the Claude Code session to attach to; optionally a second session for the call's insights.",
        ],
        tested_with: &[],
        known_bad: &[],
    },
];

/// Every peer, in the order Settings lists them.
pub fn all() -> &'static [Provider] {
    PROVIDERS
}

/// A provider descriptor by id.
pub fn provider(id: &str) -> Option<&'static Provider> {
    PROVIDERS.iter().find(|p| p.id == id)
}

/// A plain-words warning when `version` of `package` (as the peer reports it) is not one
/// StageWhisper is tested with, or is known to be bad. `None` when it is tested.
pub fn version_warning(provider_id: &str, package: &str, version: &str) -> Option<String> {
    let p = provider(provider_id)?;
    let version = version.trim().trim_start_matches('v');
    if let Some(bad) = p
        .known_bad
        .iter()
        .find(|b| b.package == package && version.starts_with(b.versions))
    {
        return Some(format!("{package} {version}: {}", bad.warning));
    }
    let tested = p.tested_with.iter().find(|t| t.package == package)?;
    if version.starts_with(tested.series) {
        return None;
    }
    Some(format!(
        "{} reports {package} {version}, which StageWhisper is not tested with (tested: {}). \
         It may work; if replies go missing or arrive twice, install {package} {}.",
        p.name, tested.version, tested.version
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compared_with_the_descriptor() {
        assert_eq!(
            version_warning("hermes-adapter", "hermes-platform-stagewhisper", "0.43.0"),
            None
        );
        assert_eq!(
            version_warning("hermes-adapter", "hermes-platform-stagewhisper", "0.43.7"),
            None
        );
        let w =
            version_warning("hermes-adapter", "hermes-platform-stagewhisper", "0.44.1").unwrap();
        assert!(w.contains("0.44.1") && w.contains("0.43.0"), "{w}");
        let w = version_warning("openclaw-channel-http", "openclaw", "2026.9.6").unwrap();
        assert!(w.contains("errored") || w.contains("error"), "{w}");
        assert_eq!(
            version_warning("openclaw-channel-http", "openclaw", "2026.3.23"),
            None
        );
        assert_eq!(version_warning("nope", "x", "1"), None);
    }
}
