//! The turn's ONE tool list: the very list the model sees, the list a script
//! is started with, and the list every call is looked up in.

use super::error::TurnError;
use super::tool::Tool;
use crate::client::ToolDef;
use std::collections::HashSet;
use std::sync::RwLock;

/// The turn's tools, in registration order, with their activation state.
///
/// Activating a deferred tool changes this one list, so the lookup step sees
/// it at once, for the model and for a script already running. Locks are held
/// only for copies, never across an await.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    tools: Vec<Tool>,
    activated: HashSet<String>,
}

/// The result of looking a name up (step 2).
#[derive(Debug, Clone)]
pub enum Lookup {
    /// The tool is listed and callable.
    Found(Tool),
    /// The tool is deferred and not activated yet.
    NotActivated,
    /// No tool of that name.
    NotFound,
}

/// A tool as listed to the model.
#[derive(Debug, Clone, PartialEq)]
pub enum ListedTool {
    /// A callable tool: name, description and input schema.
    Full(ToolDef),
    /// A deferred tool not activated yet: its name only.
    NameOnly(String),
}

impl ToolRegistry {
    /// An empty list.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `tool` to the list.
    ///
    /// # Errors
    /// [`TurnError::DuplicateTool`] if a tool of that name is already listed.
    pub fn register(&self, tool: Tool) -> Result<(), TurnError> {
        let mut state = self.write();
        if state.tools.iter().any(|t| t.name() == tool.name()) {
            return Err(TurnError::DuplicateTool(tool.name().to_owned()));
        }
        state.tools.push(tool);
        Ok(())
    }

    /// Activates the deferred tool `name`; returns `true` if it was not
    /// activated before. Activating a tool that is not deferred is a no-op
    /// returning `false`.
    ///
    /// # Errors
    /// [`TurnError::UnknownTool`] if no tool of that name is listed.
    pub fn activate(&self, name: &str) -> Result<bool, TurnError> {
        let mut state = self.write();
        let Some(tool) = state.tools.iter().find(|t| t.name() == name) else {
            return Err(TurnError::UnknownTool(name.to_owned()));
        };
        if !tool.meta().deferred {
            return Ok(false);
        }
        Ok(state.activated.insert(name.to_owned()))
    }

    /// Looks `name` up in the current list.
    pub fn lookup(&self, name: &str) -> Lookup {
        let state = self.read();
        match state.tools.iter().find(|t| t.name() == name) {
            None => Lookup::NotFound,
            Some(tool) if tool.meta().deferred && !state.activated.contains(name) => Lookup::NotActivated,
            Some(tool) => Lookup::Found(tool.clone()),
        }
    }

    /// True when `name` is listed and callable (not deferred, or activated).
    pub fn is_callable(&self, name: &str) -> bool {
        matches!(self.lookup(name), Lookup::Found(_))
    }

    /// The list as the model sees it: callable tools in full, deferred ones
    /// not yet activated by name only.
    pub fn model_view(&self) -> Vec<ListedTool> {
        let state = self.read();
        state
            .tools
            .iter()
            .map(|t| {
                if t.meta().deferred && !state.activated.contains(t.name()) {
                    ListedTool::NameOnly(t.name().to_owned())
                } else {
                    ListedTool::Full(tool_def(t))
                }
            })
            .collect()
    }

    /// The callable tools (deferred ones only once activated) as sent to the
    /// sidecar: name, description, input schema; no metadata. Tools a script
    /// may not call are listed too: calling them is refused at step 3, with a
    /// reason the script can read.
    pub fn script_tools(&self) -> Vec<ToolDef> {
        self.model_view()
            .into_iter()
            .filter_map(|t| match t {
                ListedTool::Full(def) => Some(def),
                ListedTool::NameOnly(_) => None,
            })
            .collect()
    }
}

fn tool_def(tool: &Tool) -> ToolDef {
    let spec = tool.spec();
    ToolDef { name: spec.name.clone(), description: spec.description.clone(), input_schema: spec.input_schema.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::tool::{ToolOutput, ToolSpec, executor_fn};
    use serde_json::{Value, json};

    fn tool(spec: ToolSpec) -> Tool {
        Tool::new(spec, executor_fn(|_, _| async { Ok(ToolOutput::new(Value::Null)) })).unwrap()
    }

    #[test]
    fn a_deferred_tool_is_listed_by_name_until_activated() {
        let registry = ToolRegistry::new();
        registry.register(tool(ToolSpec::new("plain", "p", json!({})))).unwrap();
        registry.register(tool(ToolSpec::new("later", "l", json!({})).deferred())).unwrap();

        assert!(matches!(registry.lookup("later"), Lookup::NotActivated));
        assert!(matches!(registry.lookup("ghost"), Lookup::NotFound));
        assert_eq!(registry.model_view()[1], ListedTool::NameOnly("later".into()));
        assert_eq!(registry.script_tools().len(), 1);

        assert!(registry.activate("later").unwrap());
        assert!(!registry.activate("later").unwrap(), "a second activation changes nothing");
        assert!(!registry.activate("plain").unwrap());
        assert!(matches!(registry.lookup("later"), Lookup::Found(_)));
        assert!(matches!(registry.model_view()[1], ListedTool::Full(ref d) if d.name == "later"));
        assert_eq!(registry.script_tools().len(), 2);
        assert!(matches!(registry.activate("ghost"), Err(TurnError::UnknownTool(_))));
    }

    #[test]
    fn names_are_unique() {
        let registry = ToolRegistry::new();
        registry.register(tool(ToolSpec::new("a", "", json!({})))).unwrap();
        assert!(matches!(registry.register(tool(ToolSpec::new("a", "", json!({})))), Err(TurnError::DuplicateTool(_))));
    }
}
