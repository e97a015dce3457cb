//! Entry points for the fuzz targets (`fuzz/` at the repository root), for checks that are
//! private to their module. Not an API: thin wrappers, no logic of their own.

use crate::http::AllowedHosts;
use crate::tokens::Secret;

pub use crate::api::Refusal;

/// The control API guard's `Host` and UI-token checks on an HTTP request head, on the path as
/// the router sees it (after the same normalisation as [`crate::api::ControlApi::handle`]).
/// Answers the normalised path too.
pub fn control_api_check<B>(
    hosts: &AllowedHosts,
    ui_token: &Secret,
    req: hyper::Request<B>,
) -> (String, Result<(), Refusal>) {
    let req = crate::api::normalize(req);
    let verdict = crate::api::check_head(hosts, ui_token, &req);
    (req.uri().path().to_string(), verdict)
}
