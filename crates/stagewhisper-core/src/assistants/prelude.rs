//! The framing every kind sends when a call starts (`system_prelude` on `insights:<call>`):
//! the default text and how a user's template is filled in.

/// The coaching framing sent as `system_prelude` on `insights:<call>` when a call starts.
/// `{title}` is replaced by the call's title.
pub const DEFAULT_PRELUDE: &str = "You are my live coach during a call ({title}). \
From now on you receive the call's transcript as it happens, one final turn at a time, as \
\"Speaker: text\".\n\
Situation: I am talking live and can only glance at a small overlay, so I can read one short \
line, not paragraphs.\n\
Playbook: watch for questions I must answer, numbers and commitments, objections and \
concerns, decisions, next steps and owners, and moments where I should ask, clarify, slow down \
or stay quiet. Prefer the concrete next move over commentary; never repeat a point you already \
made.\n\
Contract: answer every turn with ONE sentence of at most 20 words that I can act on right now, \
or exactly \"none\" when nothing is worth surfacing.";

/// Fills the prelude's placeholders: `{title}` is the quoted title; a call without one leaves
/// the placeholder out, with the parentheses or the space before it.
pub fn render_prelude(template: &str, title: Option<&str>) -> String {
    match title.map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => template.replace("{title}", &format!("\"{t}\"")),
        None => template
            .replace(" ({title})", "")
            .replace("({title})", "")
            .replace(" {title}", "")
            .replace("{title}", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prelude_placeholder() {
        assert!(
            render_prelude(DEFAULT_PRELUDE, Some("Acme renewal")).contains("(\"Acme renewal\")")
        );
        let plain = render_prelude(DEFAULT_PRELUDE, None);
        assert!(
            plain.starts_with("You are my live coach during a call. From now on"),
            "{plain}"
        );
        assert!(!plain.contains("untitled") && !plain.contains("{title}"));
        assert_eq!(
            render_prelude("Coach me on {title} now", Some(" ")),
            "Coach me on now"
        );
    }
}
