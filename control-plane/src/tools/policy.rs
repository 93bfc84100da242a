//! Effective hints and the one decision of what a session is offered and
//! what needs the user's approval.
//!
//! **Effective hints.** Per hint: the administrator's override (`toolHints`,
//! `hints/<server>/<tool>`; readOnlyHint, destructiveHint, idempotentHint),
//! else the server's annotation, else the MCP spec default (readOnly false,
//! destructive true, idempotent false, openWorld true).
//!
//! **Policy.** An administrator's policy (`policies/<server>/<tool>`), else
//! derived: `confirm` for a tool that is not read-only and whose
//! `destructiveHint: true` is *explicit* (declared or overridden), else
//! `default`. The spec default (destructive true) never forces `confirm`,
//! or every tool without annotations would need approval in `auto` mode.
//!
//! **Decision** ([`decide`]), by permission mode:
//!
//! | | `disabled` | `confirm` | `default`, read-only | `default`, not read-only |
//! |---|---|---|---|---|
//! | `ask` | not offered | approval | call | approval |
//! | `auto` | not offered | approval | call | call |
//! | `read_only` | not offered | approval (read-only tools only) | call | not offered |
//!
//! `ask` mode asks before every call that may change something: the seed
//! (16-mcp-support §2.1) has read-only tools "called directly by default"
//! and `auto` mode calling everything else without asking; only `confirm`
//! asks in `auto` too. A call without a session is decided as `auto` (an
//! operator's direct call); one that needs approval fails, as there is no
//! session to ask.

use crate::model::{HintOverrideRecord, PermissionMode, ToolPolicy};
use serde_json::Value;
use switchyard_proto::v1 as pb;

/// Where an effective hint comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintSource {
    /// The administrator's override.
    Override,
    /// The server's annotations.
    Declared,
    /// The MCP spec default.
    Default,
}

impl HintSource {
    /// `override`, `declared` or `default`.
    pub fn as_str(self) -> &'static str {
        match self {
            HintSource::Override => "override",
            HintSource::Declared => "declared",
            HintSource::Default => "default",
        }
    }
}

/// One effective hint and its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// The value.
    pub value: bool,
    /// Where it comes from.
    pub source: HintSource,
}

impl Hint {
    /// Whether it was set explicitly (declared or overridden).
    pub fn explicit(self) -> bool {
        self.source != HintSource::Default
    }
}

/// A tool's effective hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveHints {
    /// `readOnlyHint`.
    pub read_only: Hint,
    /// `destructiveHint`.
    pub destructive: Hint,
    /// `idempotentHint`.
    pub idempotent: Hint,
    /// `openWorldHint` (not overridable).
    pub open_world: Hint,
}

impl EffectiveHints {
    /// As the API shows them.
    pub fn to_pb(&self) -> pb::ToolHints {
        pb::ToolHints {
            read_only_hint: self.read_only.value,
            destructive_hint: self.destructive.value,
            idempotent_hint: self.idempotent.value,
            open_world_hint: self.open_world.value,
        }
    }

    /// Their sources as the API shows them.
    pub fn sources_pb(&self) -> pb::ToolHintSources {
        pb::ToolHintSources {
            read_only_hint: self.read_only.source.as_str().into(),
            destructive_hint: self.destructive.source.as_str().into(),
            idempotent_hint: self.idempotent.source.as_str().into(),
            open_world_hint: self.open_world.source.as_str().into(),
        }
    }

    /// Whether a call may be retried after a network error (read-only or
    /// idempotent).
    pub fn retry_safe(&self) -> bool {
        self.read_only.value || self.idempotent.value
    }

    /// The policy a tool has when no administrator set one: `confirm` for
    /// an explicit `destructiveHint: true` on a tool that is not read-only.
    pub fn derived_policy(&self) -> ToolPolicy {
        if !self.read_only.value && self.destructive.value && self.destructive.explicit() {
            ToolPolicy::Confirm
        } else {
            ToolPolicy::Default
        }
    }
}

/// Effective hints of the tool definition `def` under the overrides `ov`.
pub fn effective_hints(def: &Value, ov: Option<&HintOverrideRecord>) -> EffectiveHints {
    let a = &def["annotations"];
    let one = |key: &str, over: Option<bool>, default: bool| match over {
        Some(value) => Hint {
            value,
            source: HintSource::Override,
        },
        None => match a.get(key).and_then(Value::as_bool) {
            Some(value) => Hint {
                value,
                source: HintSource::Declared,
            },
            None => Hint {
                value: default,
                source: HintSource::Default,
            },
        },
    };
    EffectiveHints {
        read_only: one("readOnlyHint", ov.and_then(|o| o.read_only_hint), false),
        destructive: one("destructiveHint", ov.and_then(|o| o.destructive_hint), true),
        idempotent: one("idempotentHint", ov.and_then(|o| o.idempotent_hint), false),
        open_world: one("openWorldHint", None, true),
    }
}

/// The policy in force: the administrator's, else derived from the hints.
pub fn effective_policy(set: Option<ToolPolicy>, hints: &EffectiveHints) -> ToolPolicy {
    set.unwrap_or_else(|| hints.derived_policy())
}

/// What happens to a tool in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not offered (not listed; calls fail), for this reason.
    NotOffered(&'static str),
    /// Offered; called without asking.
    Call,
    /// Offered; every call needs the user's approval first.
    Approve,
}

impl Decision {
    /// Whether the tool is listed.
    pub fn offered(self) -> bool {
        !matches!(self, Decision::NotOffered(_))
    }
}

/// The decision for a tool with `policy` (effective) and effective
/// `read_only` hint in a session of permission `mode` (see the module
/// table).
pub fn decide(mode: PermissionMode, policy: ToolPolicy, read_only: bool) -> Decision {
    if policy == ToolPolicy::Disabled {
        return Decision::NotOffered("an administrator disabled it");
    }
    if mode == PermissionMode::ReadOnly && !read_only {
        return Decision::NotOffered("it is not read-only and the session is read_only");
    }
    if policy == ToolPolicy::Confirm {
        return Decision::Approve;
    }
    match (mode, read_only) {
        (_, true) => Decision::Call,
        (PermissionMode::Ask, false) => Decision::Approve,
        _ => Decision::Call,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;
    use PermissionMode::*;
    use ToolPolicy::*;
    use serde_json::json;

    #[test]
    fn the_decision_table() {
        // (mode, policy, read_only, expected)
        let table: &[(PermissionMode, ToolPolicy, bool, Decision)] = &[
            (Ask, Default, true, Call),
            (Ask, Default, false, Approve),
            (Ask, Confirm, true, Approve),
            (Ask, Confirm, false, Approve),
            (Ask, Disabled, true, NotOffered("")),
            (Ask, Disabled, false, NotOffered("")),
            (Auto, Default, true, Call),
            (Auto, Default, false, Call),
            (Auto, Confirm, true, Approve),
            (Auto, Confirm, false, Approve),
            (Auto, Disabled, true, NotOffered("")),
            (Auto, Disabled, false, NotOffered("")),
            (ReadOnly, Default, true, Call),
            (ReadOnly, Default, false, NotOffered("")),
            (ReadOnly, Confirm, true, Approve),
            (ReadOnly, Confirm, false, NotOffered("")),
            (ReadOnly, Disabled, true, NotOffered("")),
            (ReadOnly, Disabled, false, NotOffered("")),
        ];
        for &(mode, policy, ro, want) in table {
            let got = decide(mode, policy, ro);
            assert_eq!(
                std::mem::discriminant(&got),
                std::mem::discriminant(&want),
                "{mode:?} {policy:?} read_only={ro}: {got:?}"
            );
        }
        assert!(matches!(decide(Auto, Disabled, true), NotOffered(w) if w.contains("disabled")));
        assert!(
            matches!(decide(ReadOnly, Default, false), NotOffered(w) if w.contains("read_only"))
        );
    }

    #[test]
    fn hint_precedence_override_declared_default() {
        let none = json!({"name": "t"});
        let h = effective_hints(&none, None);
        assert_eq!(
            h.to_pb(),
            pb::ToolHints {
                read_only_hint: false,
                destructive_hint: true,
                idempotent_hint: false,
                open_world_hint: true
            }
        );
        assert_eq!(h.destructive.source, HintSource::Default);
        // The spec default destructive true does not force confirm.
        assert_eq!(h.derived_policy(), Default);

        let declared = json!({"name": "t", "annotations": {"readOnlyHint": false, "destructiveHint": true, "openWorldHint": false}});
        let h = effective_hints(&declared, None);
        assert_eq!(h.destructive.source, HintSource::Declared);
        assert!(!h.open_world.value);
        assert_eq!(h.derived_policy(), Confirm);
        assert!(!h.retry_safe());

        let ov = HintOverrideRecord {
            read_only_hint: Some(true),
            idempotent_hint: Some(true),
            ..HintOverrideRecord::default()
        };
        let h = effective_hints(&declared, Some(&ov));
        assert_eq!(
            (h.read_only.value, h.read_only.source),
            (true, HintSource::Override)
        );
        assert_eq!(h.destructive.source, HintSource::Declared);
        assert_eq!(h.idempotent.source, HintSource::Override);
        assert!(h.retry_safe());
        // Read-only: destructive means nothing, so no derived confirm.
        assert_eq!(h.derived_policy(), Default);

        // An overridden explicit destructive true on an unannotated tool.
        let ov = HintOverrideRecord {
            destructive_hint: Some(true),
            ..HintOverrideRecord::default()
        };
        assert_eq!(effective_hints(&none, Some(&ov)).derived_policy(), Confirm);
        // An administrator's policy wins over the derived one.
        let h = effective_hints(&declared, None);
        assert_eq!(effective_policy(Some(Default), &h), Default);
        assert_eq!(effective_policy(None, &h), Confirm);
    }
}
