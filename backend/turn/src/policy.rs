//! Step 5: the administrator's allow / deny / needs-approval rules, per tool
//! and per argument pattern, and the blocks that follow from the user's
//! permissions.
//!
//! Patterns are kept simple on purpose: a tool-name glob, and for arguments a
//! JSON pointer plus an equality, prefix or glob match.

use serde_json::Value;

/// What a rule does with a matching call. Ordered from least to most
/// restrictive; when several rules match, the most restrictive wins, so the
/// order rules are written in does not matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum PolicyAction {
    /// Run without approval (unless the tool itself requires it).
    #[default]
    Allow,
    /// Run only after the approver says yes.
    NeedsApproval,
    /// Refuse (`policy_denied`).
    Deny,
}

/// How an argument value is matched.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgMatch {
    /// The value equals this JSON value.
    Equals(Value),
    /// The value is a string starting with this.
    Prefix(String),
    /// The value is a string matching this glob (`*` any run, `?` one char).
    Glob(String),
    /// The pointer resolves to any value.
    Present,
}

/// One argument condition: the value at a JSON pointer (e.g. `/to`) matches.
/// A pointer that resolves to nothing never matches.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgPattern {
    /// An RFC 6901 JSON pointer into the arguments; `""` is the whole object.
    pub pointer: String,
    /// The match.
    pub matcher: ArgMatch,
}

impl ArgPattern {
    /// The value at `pointer` matches `matcher`.
    pub fn new(pointer: impl Into<String>, matcher: ArgMatch) -> Self {
        ArgPattern { pointer: pointer.into(), matcher }
    }

    /// True when `args` match.
    pub fn matches(&self, args: &Value) -> bool {
        let Some(value) = args.pointer(&self.pointer) else { return false };
        match &self.matcher {
            ArgMatch::Equals(expected) => value == expected,
            ArgMatch::Prefix(prefix) => value.as_str().is_some_and(|s| s.starts_with(prefix.as_str())),
            ArgMatch::Glob(pattern) => value.as_str().is_some_and(|s| glob_match(pattern, s)),
            ArgMatch::Present => true,
        }
    }
}

/// Which calls a rule or block applies to: a tool-name glob and argument
/// conditions that must ALL hold (none: any arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct CallPattern {
    /// A glob over tool names, e.g. `send_*` or `*`.
    pub tool: String,
    /// Conditions on the arguments, all required.
    pub args: Vec<ArgPattern>,
}

impl CallPattern {
    /// Calls of tools matching `tool`, any arguments.
    pub fn tool(tool: impl Into<String>) -> Self {
        CallPattern { tool: tool.into(), args: Vec::new() }
    }

    /// Adds an argument condition.
    pub fn when(mut self, pointer: impl Into<String>, matcher: ArgMatch) -> Self {
        self.args.push(ArgPattern::new(pointer, matcher));
        self
    }

    /// True when the call matches.
    pub fn matches(&self, tool: &str, args: &Value) -> bool {
        glob_match(&self.tool, tool) && self.args.iter().all(|a| a.matches(args))
    }
}

/// One administrator rule.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRule {
    /// The calls it applies to.
    pub pattern: CallPattern,
    /// What it does with them.
    pub action: PolicyAction,
    /// Why, shown in the refusal or approval prompt.
    pub reason: Option<String>,
}

/// The administrator's policy. Default: no rules, and calls no rule matches
/// are allowed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdminPolicy {
    rules: Vec<PolicyRule>,
    default: PolicyAction,
}

impl AdminPolicy {
    /// A policy whose unmatched calls get `default`.
    pub fn with_default(default: PolicyAction) -> Self {
        AdminPolicy { rules: Vec::new(), default }
    }

    /// Adds a rule.
    pub fn rule(mut self, pattern: CallPattern, action: PolicyAction, reason: Option<&str>) -> Self {
        self.rules.push(PolicyRule { pattern, action, reason: reason.map(str::to_owned) });
        self
    }

    /// Denies calls matching `pattern`.
    pub fn deny(self, pattern: CallPattern, reason: &str) -> Self {
        self.rule(pattern, PolicyAction::Deny, Some(reason))
    }

    /// Requires approval for calls matching `pattern`.
    pub fn needs_approval(self, pattern: CallPattern) -> Self {
        self.rule(pattern, PolicyAction::NeedsApproval, None)
    }

    /// Allows calls matching `pattern`.
    pub fn allow(self, pattern: CallPattern) -> Self {
        self.rule(pattern, PolicyAction::Allow, None)
    }

    /// The most restrictive action among matching rules (or the default when
    /// none match), with the reason of the rule that decided.
    pub fn judge(&self, tool: &str, args: &Value) -> (PolicyAction, Option<&str>) {
        self.rules
            .iter()
            .filter(|r| r.pattern.matches(tool, args))
            .max_by_key(|r| r.action)
            .map_or((self.default, None), |r| (r.action, r.reason.as_deref()))
    }
}

/// Blocks that follow from the user's permissions (e.g. a user without the
/// mail role cannot send email). Default: none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserPermissions {
    blocks: Vec<(CallPattern, String)>,
}

impl UserPermissions {
    /// No blocks.
    pub fn new() -> Self {
        UserPermissions::default()
    }

    /// Blocks calls matching `pattern`, for `reason`.
    pub fn block(mut self, pattern: CallPattern, reason: impl Into<String>) -> Self {
        self.blocks.push((pattern, reason.into()));
        self
    }

    /// The reason the first matching block gives, if any.
    pub fn blocked(&self, tool: &str, args: &Value) -> Option<&str> {
        self.blocks.iter().find(|(p, _)| p.matches(tool, args)).map(|(_, reason)| reason.as_str())
    }
}

/// A glob over a whole string: `*` matches any run (also empty), `?` one
/// character; everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matcher with one backtrack point: linear in practice, no recursion.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_whole_strings() {
        assert!(glob_match("*", ""));
        assert!(glob_match("send_*", "send_email"));
        assert!(!glob_match("send_*", "resend_email"));
        assert!(glob_match("*@example.com", "dana@example.com"));
        assert!(!glob_match("*@example.com", "dana@example.com.evil"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(glob_match("get_contract", "get_contract"));
        assert!(!glob_match("get_contract", "get_contracts"));
    }

    #[test]
    fn the_most_restrictive_matching_rule_wins_whatever_the_order() {
        let policy = AdminPolicy::default()
            .allow(CallPattern::tool("*"))
            .deny(
                CallPattern::tool("send_email").when("/to", ArgMatch::Glob("*@competitor.com".into())),
                "no mail to competitors",
            )
            .needs_approval(CallPattern::tool("send_*"));
        let to = |addr: &str| json!({"to": addr});
        assert_eq!(policy.judge("list_issues", &json!({})).0, PolicyAction::Allow);
        assert_eq!(policy.judge("send_email", &to("dana@example.com")).0, PolicyAction::NeedsApproval);
        assert_eq!(
            policy.judge("send_email", &to("x@competitor.com")),
            (PolicyAction::Deny, Some("no mail to competitors"))
        );
    }

    #[test]
    fn argument_patterns_need_the_value_present() {
        let eq = ArgPattern::new("/customer_id", ArgMatch::Equals(json!("c1")));
        assert!(eq.matches(&json!({"customer_id": "c1"})));
        assert!(!eq.matches(&json!({"customer_id": "c2"})));
        assert!(!eq.matches(&json!({})));
        let prefix = ArgPattern::new("/path", ArgMatch::Prefix("/etc".into()));
        assert!(prefix.matches(&json!({"path": "/etc/passwd"})));
        assert!(!prefix.matches(&json!({"path": 5})));
        assert!(ArgPattern::new("/a/0", ArgMatch::Present).matches(&json!({"a": [1]})));
    }

    #[test]
    fn user_blocks_name_their_reason() {
        let perms = UserPermissions::new().block(CallPattern::tool("delete_*"), "read-only user");
        assert_eq!(perms.blocked("delete_issue", &json!({})), Some("read-only user"));
        assert_eq!(perms.blocked("list_issues", &json!({})), None);
    }
}
