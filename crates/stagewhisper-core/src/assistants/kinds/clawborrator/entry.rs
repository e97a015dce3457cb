//! The `clawborrator` kind's line in the list of kinds.

use super::kind::KIND;
use super::ClawborratorKind;
use crate::assistants::kinds::registry::{FieldInput, KindEntry, KindInfo, SettingField};
use std::sync::Arc;

const SETTINGS: &[SettingField] = &[
    SettingField {
        required: true,
        hint: "The hub's base URL, https:// (plain http:// only to this computer).",
        ..SettingField::new("hub_url", "Hub URL", FieldInput::Url)
    },
    SettingField {
        required: true,
        hint: "The operator session token (cw_sess_…).",
        ..SettingField::new("session_token", "Session token", FieldInput::Secret)
    },
    SettingField {
        required: true,
        hint: "The Claude Code session to attach to.",
        ..SettingField::new("session_id", "Claude Code session", FieldInput::Text)
    },
    SettingField {
        hint: "A second session for the call's insights (empty: none).",
        ..SettingField::new("insights_session_id", "Insights session", FieldInput::Text)
    },
];

pub const ENTRY: KindEntry = KindEntry {
    info: KindInfo {
        settings: SETTINGS,
        ..KindInfo::new(
            KIND,
            "clawborrator hub",
            "The app joins a Claude Code session you run through a clawborrator hub: its answers, and its permission requests for you to allow or deny. Choose it when your assistant is Claude Code.",
        )
    },
    start: |ctx, deps| Arc::new(ClawborratorKind::start(ctx, deps.hub_timing.clone())),
};
