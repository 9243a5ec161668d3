//! Topic names, topic filters and matching (5.0 §4.7, 3.1.1 §4.7).
//!
//! A topic name is what a PUBLISH is sent to; a topic filter is what a subscription asks for
//! and may contain the wildcards `+` (exactly one level) and `#` (any number of levels,
//! including none, at the end). Levels are separated by `/`, and empty levels are allowed
//! ("a//b", "/a"). Shared subscriptions (5.0 §4.8.2) are filters of the form
//! `$share/{ShareName}/{filter}`; [`matches`] does not understand that prefix, callers strip
//! it with [`parse_shared`] first.

use crate::DecodeError;

/// Longest topic name or filter: a UTF-8 Encoded String holds at most 65,535 bytes
/// [MQTT-4.7.3-3].
const MAX_TOPIC_LEN: usize = u16::MAX as usize;

const SHARE_PREFIX: &str = "$share/";

fn check_common(t: &str, empty_msg: &'static str) -> Result<(), DecodeError> {
    // [MQTT-4.7.3-1] All Topic Names and Topic Filters MUST be at least one character long.
    if t.is_empty() {
        return Err(DecodeError::Topic(empty_msg));
    }
    if t.len() > MAX_TOPIC_LEN {
        return Err(DecodeError::Topic("longer than 65535 bytes"));
    }
    // [MQTT-4.7.3-2] Topic Names and Topic Filters MUST NOT include the null character.
    if t.contains('\0') {
        return Err(DecodeError::Topic("contains U+0000"));
    }
    Ok(())
}

/// Checks a topic name as found in PUBLISH or a will: non-empty, at most 65,535 bytes, no
/// U+0000 and no wildcard characters [MQTT-3.3.2-2].
///
/// The empty name that 5.0 allows together with a Topic Alias (5.0 §3.3.2.3.4) is handled by
/// the PUBLISH decoder, not here.
pub fn validate_topic_name(t: &str) -> Result<(), DecodeError> {
    check_common(t, "empty topic name")?;
    if t.contains(['+', '#']) {
        return Err(DecodeError::Topic("wildcard in topic name"));
    }
    Ok(())
}

/// Checks one filter without the shared-subscription prefix.
fn validate_plain_filter(f: &str) -> Result<(), DecodeError> {
    check_common(f, "empty topic filter")?;
    let mut levels = f.split('/').peekable();
    while let Some(level) = levels.next() {
        match level {
            // [MQTT-4.7.1-2] '#' MUST be the last character, alone in its level.
            "#" if levels.peek().is_some() => {
                return Err(DecodeError::Topic("'#' not in the last level"));
            }
            "#" | "+" => {}
            // [MQTT-4.7.1-2], [MQTT-4.7.1-3]: otherwise a wildcard must occupy a whole level.
            _ if level.contains(['+', '#']) => {
                return Err(DecodeError::Topic("wildcard not occupying a whole level"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a topic filter as found in SUBSCRIBE or UNSUBSCRIBE.
///
/// Besides the wildcard rules, a filter starting with `$share/` must be a valid shared
/// subscription: a non-empty ShareName without `/`, `+` or `#` [MQTT-4.8.2-1], [MQTT-4.8.2-2],
/// followed by `/` and a non-empty valid filter.
pub fn validate_topic_filter(f: &str) -> Result<(), DecodeError> {
    check_common(f, "empty topic filter")?;
    let Some(rest) = f.strip_prefix(SHARE_PREFIX) else {
        return validate_plain_filter(f);
    };
    let Some((group, filter)) = rest.split_once('/') else {
        return Err(DecodeError::Topic(
            "shared subscription without a topic filter",
        ));
    };
    if group.is_empty() {
        return Err(DecodeError::Topic("empty share name"));
    }
    if group.contains(['+', '#']) {
        return Err(DecodeError::Topic("wildcard in share name"));
    }
    validate_plain_filter(filter)
}

/// Splits a shared subscription `$share/{group}/{filter}` into its group and filter.
///
/// Returns `None` for a filter that is not shared, i.e. that does not start with `$share/`
/// followed by a `/`-terminated group. Does not validate the parts: use
/// [`validate_topic_filter`] for that.
pub fn parse_shared(filter: &str) -> Option<(&str, &str)> {
    filter.strip_prefix(SHARE_PREFIX)?.split_once('/')
}

/// Whether the (plain, non-shared) topic filter `filter` matches the topic name `topic`
/// (5.0 §4.7.1 and §4.7.2).
///
/// - `+` matches exactly one level, which may be empty: `+/+` matches `/finance`.
/// - `#` matches the parent level and any number of child levels: `sport/#` matches `sport`,
///   `sport/` and `sport/tennis/player1` [MQTT-4.7.1-2].
/// - A filter starting with a wildcard does not match a topic starting with `$`
///   [MQTT-4.7.2-1]: `#` does not match `$SYS/broker/uptime`, `$SYS/#` does.
/// - Everything else compares byte for byte, case-sensitively.
pub fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && filter.starts_with(['+', '#']) {
        return false;
    }
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            // '#' matches whatever is left, including nothing (the parent level).
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(fl), Some(tl)) if fl == tl => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic_err(r: Result<(), DecodeError>) -> bool {
        matches!(r, Err(DecodeError::Topic(_)))
    }

    #[test]
    fn topic_names() {
        for ok in [
            "a",
            "/",
            "a/b",
            "/a",
            "a//b",
            "$SYS/x",
            "sport/tennis player1",
            "€",
        ] {
            assert!(validate_topic_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/+", "#", "a/#", "a+", "x#y", "a\0b"] {
            assert!(topic_err(validate_topic_name(bad)), "{bad:?}");
        }
        assert!(validate_topic_name(&"a".repeat(65_535)).is_ok());
        assert!(topic_err(validate_topic_name(&"a".repeat(65_536))));
    }

    #[test]
    fn plain_filters() {
        for ok in [
            "#",
            "+",
            "a/#",
            "a/+/b",
            "+/+",
            "/+",
            "a//b",
            "+/tennis/#",
            "$SYS/#",
            "/",
        ] {
            assert!(validate_topic_filter(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a#", "a/#/b", "#/a", "a/b#", "a+", "a/+b", "++", "##", "a\0",
        ] {
            assert!(topic_err(validate_topic_filter(bad)), "{bad:?}");
        }
        assert!(topic_err(validate_topic_filter(&"a".repeat(65_536))));
    }

    #[test]
    fn shared_filters() {
        for ok in [
            "$share/g/a",
            "$share/g/#",
            "$share/g/+/x",
            "$share/g//",
            "$share/g/$share/x",
        ] {
            assert!(validate_topic_filter(ok).is_ok(), "{ok}");
        }
        for bad in [
            "$share/g",   // no filter
            "$share/g/",  // empty filter
            "$share//a",  // empty group
            "$share/+/a", // wildcard in group
            "$share/#/a",
            "$share/g+/a",
            "$share/g/a#", // invalid filter
            "$share/",
        ] {
            assert!(topic_err(validate_topic_filter(bad)), "{bad:?}");
        }
        // Not shared subscriptions at all, just filters starting with "$share".
        assert!(validate_topic_filter("$share").is_ok());
        assert!(validate_topic_filter("$sharex/g").is_ok());
    }

    #[test]
    fn parse_shared_splits_group_and_filter() {
        assert_eq!(parse_shared("$share/g/a/b"), Some(("g", "a/b")));
        assert_eq!(parse_shared("$share/g/#"), Some(("g", "#")));
        assert_eq!(parse_shared("$share/g"), None);
        assert_eq!(parse_shared("a/b"), None);
        assert_eq!(parse_shared("$SYS/x"), None);
    }

    #[test]
    fn matching_spec_examples() {
        // 5.0 §4.7.1.2
        for t in [
            "sport/tennis/player1",
            "sport/tennis/player1/ranking",
            "sport/tennis/player1/score/wimbledon",
        ] {
            assert!(matches("sport/tennis/player1/#", t), "{t}");
        }
        assert!(matches("sport/#", "sport"));
        assert!(matches("sport/#", "sport/"));
        assert!(matches("#", "anything/at/all"));
        assert!(!matches("sport/tennis/#", "sport"));
        assert!(!matches("sport/tennis/#", "sport/tennisx"));
        // 5.0 §4.7.1.3
        assert!(matches("sport/tennis/+", "sport/tennis/player1"));
        assert!(matches("sport/tennis/+", "sport/tennis/player2"));
        assert!(!matches("sport/tennis/+", "sport/tennis/player1/ranking"));
        assert!(!matches("sport/+", "sport"));
        assert!(matches("sport/+", "sport/"));
        assert!(matches("+/+", "/finance"));
        assert!(matches("/+", "/finance"));
        assert!(!matches("+", "/finance"));
        assert!(matches("+/tennis/#", "sport/tennis/x"));
    }

    #[test]
    fn matching_is_exact_otherwise() {
        assert!(matches("a/b", "a/b"));
        assert!(!matches("a/b", "a/B"));
        assert!(!matches("a/b", "a/b/c"));
        assert!(!matches("a/b/c", "a/b"));
        assert!(!matches("a/b", "a/b/"));
        assert!(matches("a//b", "a//b"));
        assert!(matches("a/+/b", "a//b"));
    }

    #[test]
    fn wildcards_at_the_start_do_not_match_dollar_topics() {
        // [MQTT-4.7.2-1]
        assert!(!matches("#", "$SYS/broker/uptime"));
        assert!(!matches("+/monitor/Clients", "$SYS/monitor/Clients"));
        assert!(matches("$SYS/#", "$SYS/broker/uptime"));
        assert!(matches("$SYS/monitor/+", "$SYS/monitor/Clients"));
        // Only the first character counts.
        assert!(matches("a/#", "a/$x"));
    }
}
