//! Where every kind tells its assistant to post replies.

use crate::tokens::Secret;
use std::sync::{Arc, RwLock};

/// Where the assistant posts replies: this app's callback origin (a tunnel may change it, so it
/// is read at send time) and the callback token (rotatable).
pub struct CallbackTarget {
    url: RwLock<String>,
    token: Arc<Secret>,
}

impl CallbackTarget {
    pub fn new(url: String, token: Arc<Secret>) -> Self {
        CallbackTarget {
            url: RwLock::new(url),
            token,
        }
    }

    pub fn url(&self) -> String {
        self.url.read().expect("url lock").clone()
    }

    /// E.g. a tunnel came up: later sends carry the new origin.
    pub fn set_url(&self, url: String) {
        *self.url.write().expect("url lock") = url;
    }

    pub fn token(&self) -> String {
        self.token.get()
    }
}
