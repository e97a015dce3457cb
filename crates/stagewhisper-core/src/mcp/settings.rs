//! The MCP switch as a section of the settings store (`mcp`).

use crate::settings::{Legacy, Section};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Whether the person let their assistant look up past calls (off unless turned on).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpSettings {
    pub enabled: bool,
}

impl Section for McpSettings {
    const KEY: &'static str = "mcp";

    /// `mcp.json` of older versions: `{"enabled": true|false}`.
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        Legacy::from_file(data_dir.join(super::SETTINGS_FILE), |s| s)
    }
}
