//! The `byo` kind's line in the list of kinds (no settings fields: it pairs by a code through
//! its own routes).

use super::kind::{ByoKind, KIND};
use crate::assistants::kinds::registry::{KindEntry, KindInfo};
use std::sync::Arc;

pub const ENTRY: KindEntry = KindEntry {
    info: KindInfo::new(
        KIND,
        "BYO relay",
        "Your assistant's StageWhisper plugin pairs with this app by a code and reaches it through an end-to-end encrypted relay. Choose it when the assistant runs on another machine.",
    ),
    start: |ctx, _| Arc::new(ByoKind::start(ctx)),
};
