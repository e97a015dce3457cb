//! The `openclaw-gateway` kind's line in the list of kinds.

use super::kind::KIND;
use super::GatewayKind;
use crate::assistants::kinds::registry::{FieldInput, KindEntry, KindInfo, SettingField};
use std::sync::Arc;

const SETTINGS: &[SettingField] = &[
    SettingField {
        required: true,
        hint: "The Gateway's WebSocket URL (ws:// on this computer, else wss://).",
        ..SettingField::new("url", "Gateway URL", FieldInput::Url)
    },
    SettingField {
        required: true,
        hint: "The gateway token (gateway.auth.token).",
        ..SettingField::new("token", "Gateway token", FieldInput::Secret)
    },
    SettingField {
        hint: "The prefix of this app's own gateway sessions (default: stagewhisper).",
        ..SettingField::new("session_key", "Session key", FieldInput::Text)
    },
];

pub const ENTRY: KindEntry = KindEntry {
    info: KindInfo {
        settings: SETTINGS,
        can_stop: true,
        ..KindInfo::new(
            KIND,
            "OpenClaw Gateway",
            "The app talks to any OpenClaw install through its Gateway, with nothing installed into OpenClaw. Choose it when you run OpenClaw and want no plugin.",
        )
    },
    start: |ctx, _| Arc::new(GatewayKind::start(ctx)),
};
