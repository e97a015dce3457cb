//! The `byo` assistant kind: the desktop serves the BYO relay API that the real plugins pair with.
pub mod crypto;
pub mod replay;
