//! The `incoming` kind's line in the list of kinds.

use super::IncomingKind;
use crate::assistants::kinds::registry::{FieldInput, KindEntry, KindInfo, SettingField};
use std::sync::Arc;

const SETTINGS: &[SettingField] = &[
    SettingField {
        required: true,
        hint: "Where the assistant listens (Hermes adapter, OpenClaw channel). Loopback only.",
        ..SettingField::new("base_url", "Base URL", FieldInput::Url)
    },
    SettingField {
        required: true,
        hint: "The token the assistant expects; 16 or more characters.",
        ..SettingField::new("relay_token", "Relay token", FieldInput::Secret)
    },
    SettingField {
        choices: &["auto", "callback", "events"],
        ..SettingField::new("mode", "Replies", FieldInput::Choice)
    },
    SettingField {
        hint: "Sent when a call starts; {title} is the call's title.",
        ..SettingField::new("prelude", "Prelude", FieldInput::Multiline)
    },
];

pub const ENTRY: KindEntry = KindEntry {
    info: KindInfo {
        settings: SETTINGS,
        ..KindInfo::new(
            "incoming",
            "Direct relay",
            "The app and your assistant (Hermes Agent with the StageWhisper adapter, or OpenClaw with the StageWhisper channel) talk over this computer's loopback. Choose it when the assistant runs on this computer.",
        )
    },
    start: |ctx, deps| Arc::new(IncomingKind::start(ctx, deps.link)),
};
