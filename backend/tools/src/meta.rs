//! The metadata keys every tool entry takes — `[[tools]]`, an `[mcp.<name>]`
//! server (as defaults for its tools) and `[mcp.<name>.tools.<tool>]` — and
//! how they become the turn's [`ToolMeta`]. Code decides by this metadata,
//! never the model.

use serde::Deserialize;
use std::time::Duration;
use tether_turn::{ApprovalRequirement, RepeatRule, ToolMeta, ToolReplay};

/// The metadata keys, as a configuration file spells them.
pub(crate) const META_KEYS: [&str; 7] =
    ["requires_approval", "read_only", "deferred", "replay", "repeat", "timeout", "concurrent"];

/// One layer of metadata; unset keys fall through to the layer below
/// ([`MetaEntry::over`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct MetaEntry {
    /// Every call needs an approver's yes.
    pub(crate) requires_approval: Option<bool>,
    /// Has no effects: no ledger rows, identical repeats allowed.
    pub(crate) read_only: Option<bool>,
    /// Listed by name only until activated.
    pub(crate) deferred: Option<bool>,
    /// `"never"` (default) or `"safe"` (idempotent).
    pub(crate) replay: Option<Replay>,
    /// `"default"`, `"refuse"` or `"allow"`.
    pub(crate) repeat: Option<Repeat>,
    /// The tool's own time limit, e.g. `"30s"`, `"500ms"`.
    pub(crate) timeout: Option<String>,
    /// Script calls may run alongside other script calls (default: as `read_only`).
    pub(crate) concurrent: Option<bool>,
}

/// `replay = "never" | "safe"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Replay {
    Never,
    Safe,
}

/// `repeat = "default" | "refuse" | "allow"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Repeat {
    Default,
    Refuse,
    Allow,
}

impl MetaEntry {
    /// This layer over `below`: each key set here wins.
    pub(crate) fn over(&self, below: &MetaEntry) -> MetaEntry {
        MetaEntry {
            requires_approval: self.requires_approval.or(below.requires_approval),
            read_only: self.read_only.or(below.read_only),
            deferred: self.deferred.or(below.deferred),
            replay: self.replay.or(below.replay),
            repeat: self.repeat.or(below.repeat),
            timeout: self.timeout.clone().or_else(|| below.timeout.clone()),
            concurrent: self.concurrent.or(below.concurrent),
        }
    }

    /// The turn's metadata; unset keys take their defaults (`read_only`:
    /// `read_only_default`, the kind's own).
    ///
    /// # Errors
    /// The key and the problem, when `timeout` is not a duration.
    pub(crate) fn to_meta(&self, read_only_default: bool) -> Result<ToolMeta, (&'static str, String)> {
        let read_only = self.read_only.unwrap_or(read_only_default);
        let time_limit = self.timeout.as_deref().map(parse_duration).transpose().map_err(|e| ("timeout", e))?;
        Ok(ToolMeta {
            deferred: self.deferred.unwrap_or(false),
            approval: if self.requires_approval.unwrap_or(false) {
                ApprovalRequirement::Always
            } else {
                ApprovalRequirement::PolicyDecides
            },
            time_limit,
            repeat: match self.repeat.unwrap_or(Repeat::Default) {
                Repeat::Default => RepeatRule::RefuseUnlessReadOnly,
                Repeat::Refuse => RepeatRule::Refuse,
                Repeat::Allow => RepeatRule::Allow,
            },
            replay: match self.replay.unwrap_or(Replay::Never) {
                Replay::Never => ToolReplay::Never,
                Replay::Safe => ToolReplay::Safe,
            },
            concurrency_safe: self.concurrent.unwrap_or(read_only),
            read_only,
            ..ToolMeta::default()
        })
    }
}

/// A positive duration such as `"30s"`, `"1m 30s"` or `"250ms"`.
///
/// # Errors
/// What is wrong with it, and what to write.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("`{text}` is zero; give a positive duration such as \"30s\"")),
        Err(e) => Err(format!("`{text}` is not a duration ({e}); write e.g. \"30s\", \"500ms\" or \"2m\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_fall_through_and_defaults_follow_read_only() {
        let server = MetaEntry { read_only: Some(true), timeout: Some("5s".into()), ..MetaEntry::default() };
        let tool = MetaEntry { read_only: Some(false), requires_approval: Some(true), ..MetaEntry::default() };
        let meta = tool.over(&server).to_meta(false).unwrap();
        assert!(!meta.read_only && !meta.concurrency_safe, "the tool's own key wins; concurrent follows read_only");
        assert_eq!(meta.approval, ApprovalRequirement::Always);
        assert_eq!(meta.time_limit, Some(Duration::from_secs(5)), "the server's default applies");
        let read = MetaEntry::default().over(&server).to_meta(false).unwrap();
        assert!(read.read_only && read.concurrency_safe && !read.refuses_repeats());
        assert!(MetaEntry::default().to_meta(true).unwrap().read_only, "the kind's default");
    }

    #[test]
    fn a_bad_duration_names_the_key_and_the_fix() {
        let entry = MetaEntry { timeout: Some("30 seconds please".into()), ..MetaEntry::default() };
        let (key, problem) = entry.to_meta(false).unwrap_err();
        assert_eq!(key, "timeout");
        assert!(problem.contains("\"30s\""), "{problem}");
        assert!(parse_duration("0s").unwrap_err().contains("zero"));
        assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
    }
}
