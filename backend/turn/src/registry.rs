//! The turn's ONE tool list: the very list the model sees, the list a script
//! is started with, and the list every call is looked up in — and [`Tool`],
//! a tool ready for it (spec, compiled input schema, executor).

use super::error::TurnError;
use super::executor::ToolExecutor;
use super::tool::{ToolDef, ToolMeta, ToolSpec};
use serde_json::Value;
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, RwLock};

/// A tool ready for the registry: its definition (the spec, and the schema
/// as the JSON text a script run is offered), its compiled input schema and
/// its executor. Cheap to clone.
#[derive(Clone)]
pub struct Tool {
    def: ToolDef,
    validator: Arc<jsonschema::Validator>,
    executor: Arc<dyn ToolExecutor>,
}

impl Tool {
    /// A tool from `spec` and `executor`.
    ///
    /// # Errors
    /// [`TurnError::InvalidSchema`] if the input schema does not compile
    /// (remote `$ref`s are not resolved).
    pub fn new(spec: ToolSpec, executor: Arc<dyn ToolExecutor>) -> Result<Tool, TurnError> {
        let validator = jsonschema::validator_for(&spec.input_schema)
            .map_err(|e| TurnError::InvalidSchema { tool: spec.name.clone(), reason: e.to_string() })?;
        Ok(Tool { def: ToolDef::from_spec(spec), validator: Arc::new(validator), executor })
    }

    /// The spec.
    pub fn spec(&self) -> &ToolSpec {
        self.def.spec()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.spec().name
    }

    /// The metadata.
    pub fn meta(&self) -> &ToolMeta {
        &self.spec().meta
    }

    pub(crate) fn executor(&self) -> Arc<dyn ToolExecutor> {
        self.executor.clone()
    }

    /// Checks `args` against the input schema; `Err` lists up to 5 errors,
    /// each with the location in the arguments.
    pub fn validate(&self, args: &Value) -> Result<(), String> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(args)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("at `{at}`: {e}") }
            })
            .collect();
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool").field("spec", self.spec()).finish_non_exhaustive()
    }
}

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
                    ListedTool::Full(t.def.clone())
                }
            })
            .collect()
    }

    /// The tools a caller at `depth` may call, as a script is started with
    /// them: callable (deferred ones only once activated), not excluded from
    /// scripts (a script never sees `run_script`), and — at `max_depth` or
    /// deeper — none that nest. The same list the exclusions (step 3) enforce.
    pub fn callable_tools(&self, depth: u32, max_depth: u32) -> Vec<ToolDef> {
        self.callable(depth, max_depth).iter().map(|tool| tool.def.clone()).collect()
    }

    /// [`callable_tools`](Self::callable_tools)'s tools with their whole
    /// specs (output schemas, metadata): what the typed stubs are made from.
    pub fn callable_specs(&self, depth: u32, max_depth: u32) -> Vec<ToolSpec> {
        self.callable(depth, max_depth).iter().map(|t| t.spec().clone()).collect()
    }

    fn callable(&self, depth: u32, max_depth: u32) -> Vec<Tool> {
        let state = self.read();
        state
            .tools
            .iter()
            .filter(|t| !t.meta().deferred || state.activated.contains(t.name()))
            .filter(|t| t.meta().script_exclusion().is_none())
            .filter(|t| depth < max_depth || !t.meta().nests)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::executor_fn;
    use crate::tool::ToolOutput;
    use serde_json::json;

    fn noop() -> Arc<dyn ToolExecutor> {
        executor_fn(|_, _| async { Ok(ToolOutput::new(Value::Null)) })
    }

    fn tool(spec: ToolSpec) -> Tool {
        Tool::new(spec, noop()).unwrap()
    }

    #[test]
    fn the_callable_list_leaves_out_exclusions_and_nesting_tools_at_the_deepest_level() {
        let registry = ToolRegistry::new();
        registry.register(tool(ToolSpec::new("read", "", json!({})))).unwrap();
        registry.register(tool(ToolSpec::new("ask", "", json!({})).asks_user())).unwrap();
        let script_tool = ToolMeta { is_script_tool: true, nests: true, ..ToolMeta::default() };
        registry.register(tool(ToolSpec::new("run_script", "", json!({})).meta(script_tool))).unwrap();
        registry.register(tool(ToolSpec::new("agent_x", "", json!({})).nests())).unwrap();
        let names =
            |depth| registry.callable_tools(depth, 3).into_iter().map(|t| t.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(1), ["read", "agent_x"], "no excluded tool, and never the script tool");
        assert_eq!(names(3), ["read"], "nothing that nests at the deepest level");
    }

    #[test]
    fn a_deferred_tool_is_listed_by_name_until_activated() {
        let registry = ToolRegistry::new();
        registry.register(tool(ToolSpec::new("plain", "p", json!({})))).unwrap();
        registry.register(tool(ToolSpec::new("later", "l", json!({})).deferred())).unwrap();

        assert!(matches!(registry.lookup("later"), Lookup::NotActivated));
        assert!(matches!(registry.lookup("ghost"), Lookup::NotFound));
        assert_eq!(registry.model_view()[1], ListedTool::NameOnly("later".into()));
        assert_eq!(registry.callable_tools(1, 3).len(), 1);

        assert!(registry.activate("later").unwrap());
        assert!(!registry.activate("later").unwrap(), "a second activation changes nothing");
        assert!(!registry.activate("plain").unwrap());
        assert!(matches!(registry.lookup("later"), Lookup::Found(_)));
        assert!(matches!(registry.model_view()[1], ListedTool::Full(ref d) if d.name() == "later"));
        assert_eq!(registry.callable_tools(1, 3).len(), 2);
        assert!(matches!(registry.activate("ghost"), Err(TurnError::UnknownTool(_))));
    }

    #[test]
    fn validation_names_the_failing_location() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let tool = Tool::new(ToolSpec::new("t", "", schema), noop()).unwrap();
        assert!(tool.validate(&json!({"n": 1})).is_ok());
        let missing = tool.validate(&json!({})).unwrap_err();
        assert!(missing.contains("\"n\""), "{missing}");
        let wrong = tool.validate(&json!({"n": "x"})).unwrap_err();
        assert!(wrong.contains("/n"), "{wrong}");
    }

    #[test]
    fn a_schema_that_does_not_compile_is_an_error() {
        let err = Tool::new(ToolSpec::new("bad", "", json!({"type": 12})), noop()).unwrap_err();
        assert!(matches!(err, TurnError::InvalidSchema { ref tool, .. } if tool == "bad"), "{err}");
    }

    #[test]
    fn names_are_unique() {
        let registry = ToolRegistry::new();
        registry.register(tool(ToolSpec::new("a", "", json!({})))).unwrap();
        assert!(matches!(registry.register(tool(ToolSpec::new("a", "", json!({})))), Err(TurnError::DuplicateTool(_))));
    }
}
