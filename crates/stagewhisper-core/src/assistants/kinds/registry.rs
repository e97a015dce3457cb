//! What the list of kinds says about each kind ([`KindEntry`]): its id, the name the UI shows,
//! its settings (the fields of `PUT /api/assistant`), what it can do, and how it is started.
//! The app starts the kinds from the list, the provider registry describes them from it, and
//! `GET /api/assistant/kinds` serves it to the UI (which picks a kind's form by its id).

use super::super::{AssistantContext, AssistantKind, KindFactory};
use super::clawborrator::HubTiming;
use super::incoming::timing::LinkSettings;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

/// How a settings field is entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FieldInput {
    /// One line of text.
    Text,
    /// A URL.
    Url,
    /// Write-only: sent, never answered back (blank keeps the saved one).
    Secret,
    /// Several lines of text.
    Multiline,
    /// One of `choices`.
    Choice,
}

/// One field of a kind's settings (a key of the `PUT /api/assistant` body).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SettingField {
    /// The body key (`base_url`).
    pub name: &'static str,
    /// The label the UI shows.
    pub label: &'static str,
    pub input: FieldInput,
    /// Needed for a first save.
    pub required: bool,
    /// A plain-words hint under the field (may be empty).
    pub hint: &'static str,
    /// The values a `choice` takes (empty otherwise).
    pub choices: &'static [&'static str],
}

impl SettingField {
    /// A field with no hint and no choices (fill the rest with struct update syntax).
    pub const fn new(name: &'static str, label: &'static str, input: FieldInput) -> Self {
        SettingField {
            name,
            label,
            input,
            required: false,
            hint: "",
            choices: &[],
        }
    }
}

/// An assistant kind as the UI and the provider registry see it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KindInfo {
    /// The kind's id (`PUT /api/assistant {"kind": …}`).
    pub id: &'static str,
    /// The name the UI shows.
    pub name: &'static str,
    /// Plain words: how the app reaches the assistant.
    pub description: &'static str,
    /// Registered in this app (the UI shows the others as coming, not selectable).
    pub available: bool,
    /// Its settings, in the order a form shows them (empty: set up by its own routes, e.g. a
    /// pairing code).
    pub settings: &'static [SettingField],
    /// A running reply can be stopped (`POST /api/sessions/{session_id}/stop`).
    pub can_stop: bool,
}

impl KindInfo {
    /// A kind with no settings fields and no stop (fill the rest with struct update syntax).
    pub const fn new(id: &'static str, name: &'static str, description: &'static str) -> Self {
        KindInfo {
            id,
            name,
            description,
            available: true,
            settings: &[],
            can_stop: false,
        }
    }
}

/// What the built-in kinds are started with (the app's [`crate::Config`]).
#[derive(Debug, Clone)]
pub struct KindDeps {
    pub link: LinkSettings,
    pub hub_timing: HubTiming,
}

/// Starts a kind once the context exists. The kind it returns brings its own routes through
/// the trait ([`AssistantKind::callback_routes`], [`AssistantKind::control_routes`]).
pub type StartFn = fn(Arc<AssistantContext>, &KindDeps) -> Arc<dyn AssistantKind>;

/// One line of the list of kinds ([`super::BUILT_IN`]).
#[derive(Debug, Clone)]
pub struct KindEntry {
    pub info: KindInfo,
    pub start: StartFn,
}

/// A kind registered besides the built-in ones (tests; see [`crate::Config::extra_kinds`]):
/// its description and how to start it.
pub struct ExtraKind {
    pub info: KindInfo,
    pub start: KindFactory,
}

/// `GET /api/assistant/kinds`: every kind of this app, the active one named.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KindList {
    pub active_kind: String,
    pub kinds: Vec<KindInfo>,
}
