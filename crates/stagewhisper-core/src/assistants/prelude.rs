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

/// The prelude's line of who is on the call (`None` before anyone has spoken): the speakers
/// of the call's turns so far, in order of first appearance, as the turns name them.
pub fn people_line(people: Option<&[String]>) -> Option<String> {
    let people = people.filter(|p| !p.is_empty())?;
    Some(format!(
        "On the call so far: {}. Each turn names its speaker; a speaker may be renamed later \
         (\"Speaker 2\" becoming a name), and a name with \"?\" is a voice recognised from an \
         earlier call, not yet confirmed.",
        people.join(", ")
    ))
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

    #[test]
    fn the_people_on_the_call_once_known() {
        assert_eq!(people_line(None), None);
        assert_eq!(people_line(Some(&[])), None);
        let line = people_line(Some(&["You".into(), "Dana (Acme CFO)".into()])).unwrap();
        assert!(
            line.starts_with("On the call so far: You, Dana (Acme CFO)."),
            "{line}"
        );
    }
}
