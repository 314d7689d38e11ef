//! `tether chat` and `tether ask`: the agent loop on the model the user
//! names, over the configured tools, `run_script` and the peer agents. Every
//! call the model makes, and every call its scripts and agent tools make,
//! goes through the turn's one execution path (checks, approval, audit).
//! [`chat_loop`] reads the user's messages from the terminal, one turn each;
//! [`ask`] answers one question.

use crate::terminal::TerminalApprover;
use crate::turn::TurnSetup;
use crate::wiring::{Backend, turn_id};
use anyhow::Context;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use tether_backend::agent::{
    AgentError, AgentEvent, AgentEventSink, AgentPark, AgentRun, AgentsConfig, ModelPrompt, NestedTurnSetup,
    NoAgentEvents, PeerAgents,
};
use tether_backend::tools::ToolSet;
use tether_backend::turn::{ParkedRun, SCRIPT_TOOL_NAME, Tool, Turn, TurnBuilder};

/// A conversation with one agent: each user message is one turn (its own
/// id, limits and deadline) and the messages carry over between turns.
pub struct Session {
    agent: String,
    peers: PeerAgents,
    setup: TurnSetup,
    tools: Arc<ToolSet>,
    /// `run_script`, for the top-level turns and the nested ones.
    script: Tool,
    conversation: Vec<Value>,
    id_prefix: String,
    turns: u32,
    /// Set: a turn whose call waits for a person parks in the audit store,
    /// with this owner context ([`AgentLoop::parking`](tether_backend::agent::AgentLoop::parking)).
    parking: Option<Value>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("agent", &self.agent).field("turns", &self.turns).finish_non_exhaustive()
    }
}

impl Session {
    /// A session with `agent` of `agents`; agent tools' nested turns get the
    /// same tools, approver, audit store and events as the top-level turn.
    ///
    /// `script` is the `run_script` tool (`Backend::script`).
    pub fn new(
        agent: String,
        agents: AgentsConfig,
        setup: TurnSetup,
        tools: Arc<ToolSet>,
        script: Tool,
        events: Arc<dyn AgentEventSink>,
        id_prefix: String,
    ) -> Session {
        let nested: NestedTurnSetup = {
            let (setup, tools, script) = (setup.clone(), tools.clone(), script.clone());
            Arc::new(move |_agent: &str, builder: TurnBuilder| setup.equip(builder, &tools, &script))
        };
        let peers = PeerAgents::new(agents, nested, events);
        Session { agent, peers, setup, tools, script, conversation: Vec::new(), id_prefix, turns: 0, parking: None }
    }

    /// The agent talked to.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Turns park in the audit store when a call waits for a person who
    /// answers from elsewhere — nested agent turns included — with `owner`
    /// as their records' owner context.
    fn park_with(&mut self, owner: Value) {
        self.peers.set_parking(Some(owner.clone()));
        self.parking = Some(owner);
    }

    /// Forgets the conversation: the next message starts a new one (turns
    /// keep their numbering, so ids stay unique).
    pub fn reset(&mut self) {
        self.conversation.clear();
    }

    /// A new turn over the tools, `run_script` and this agent's agent tools,
    /// opened (its id claimed in the audit store).
    async fn turn(&mut self) -> anyhow::Result<Turn> {
        self.turns += 1;
        let id = format!("{}-{}", self.id_prefix, self.turns);
        let agent_tools = self.peers.tools_for(Some(&self.agent))?;
        Ok(self.setup.open(&id, &self.tools, &self.script, agent_tools).await?)
    }

    /// Sends `message` as the user and runs the turn to its answer or to the
    /// limit that stopped it. An answered turn's messages join the
    /// conversation; a failed one leaves it as it was (so the next message
    /// does not resume half a turn).
    ///
    /// # Errors
    /// If the agent or its turn cannot be set up (an unset key variable).
    pub async fn send(&mut self, message: &str) -> anyhow::Result<(Turn, AgentRun)> {
        let (turn, run, _) = self.send_until(message, std::future::pending::<()>()).await?;
        Ok((turn, run))
    }

    /// [`send`](Self::send), with the turn cancelled when `stop` resolves
    /// first: its calls end as `cancelled`, each with its row, and the
    /// turn's end comes back with what `stop` gave.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_until<T>(
        &mut self,
        message: &str,
        stop: impl Future<Output = T>,
    ) -> anyhow::Result<(Turn, AgentRun, Option<T>)> {
        let turn = self.turn().await?;
        let mut agent_loop = self.peers.agent_loop(&self.agent)?;
        if let Some(owner) = &self.parking {
            agent_loop = agent_loop.parking(owner.clone());
        }
        let mut conversation = self.conversation.clone();
        conversation.push(json!({"role": "user", "content": message}));
        let (run, stopped) = {
            let running = agent_loop.run(&turn, conversation);
            tokio::pin!(running);
            tokio::select! {
                run = &mut running => (run, None),
                stopped = stop => {
                    turn.cancel();
                    (running.await, Some(stopped))
                }
            }
        };
        if run.result.is_ok() {
            self.conversation = run.messages.clone();
        }
        Ok((turn, run, stopped))
    }
}

/// A session with `agent` over `backend`'s tools, `run_script`, approver
/// and audit store, its turns' ids made from `kind` ([`turn_id`]).
fn session(backend: &Backend, agent: String, agents: AgentsConfig, live: Arc<LiveView>, kind: &str) -> Session {
    Session::new(
        agent,
        agents,
        backend.setup.clone(),
        backend.tools.clone(),
        backend.script.clone(),
        live,
        turn_id(kind),
    )
}

/// `tether chat`: reads a message per line until the end of input (or
/// `/exit`), each one a turn; prints the answer, or why there is none and
/// which approval-required actions ran.
///
/// # Errors
/// If the terminal cannot be read, or a turn cannot be set up or its audit log read.
pub async fn chat_loop(backend: &Backend, agent: String, agents: AgentsConfig) -> anyhow::Result<()> {
    let live = Arc::new(LiveView::default());
    let mut session = session(backend, agent, agents, live.clone(), "chat");
    // Lines are read through the approval prompt's input when it is on this
    // terminal, so a typed answer is never taken as a message.
    let terminal = backend.terminal.clone().unwrap_or_else(|| Arc::new(TerminalApprover::new("terminal")));
    eprintln!(
        "chatting with agent `{}` over {} tools and run_script, on the sidecar at {} (/help for commands; end \
         with Ctrl-D or /exit)",
        session.agent(),
        backend.tools.tools().len(),
        backend.address
    );
    let mut last_turn: Option<String> = None;
    loop {
        // Ctrl-C at the prompt ends the chat; during a turn it cancels the turn.
        let line = tokio::select! {
            line = terminal.read_line("\nyou> ") => line?,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else { break };
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        if message == "/exit" {
            break;
        }
        if message.starts_with('/') {
            match slash_command(backend, &mut session, last_turn.as_deref(), message).await {
                Ok(text) => eprint!("{text}"),
                Err(error) => eprintln!("({error:#})"),
            }
            continue;
        }
        live.begin_answer(&format!("{}> ", session.agent()));
        // Ctrl-C cancels the turn: its calls in flight end as `cancelled`,
        // each with its audit row, and the conversation is kept as it was.
        let (turn, run, interrupted) = session.send_until(message, tokio::signal::ctrl_c()).await?;
        live.finish_line();
        match &run.result {
            Ok(_) => {}
            Err(_) if interrupted.is_some() => {
                eprintln!("(cancelled by you; the conversation is as it was before this message)");
            }
            Err(error) => {
                eprintln!("(no answer: {error})");
                for action in &run.possibly_executed {
                    eprintln!(
                        "  ran before the turn ended (not retried): {} {} {}",
                        action.call.call_id, action.call.tool, action.call.args
                    );
                }
            }
        }
        eprintln!("(turn {}: {} calls; {})", turn.id(), turn.audit_log().await?.len(), backend.audit_hint(turn.id()));
        last_turn = Some(turn.id().to_owned());
    }
    terminal.settle().await;
    Ok(())
}

/// What `/help` lists.
const SLASH_HELP: &str = "\
/help    these commands
/tools   the tools the model and its scripts can call
/audit   the last turn's calls, as `tether audit` shows them
/reset   forget the conversation; the next message starts a new one
/exit    end the chat (or Ctrl-D); Ctrl-C during a turn cancels it
";

/// Runs the chat's `/command` `line`; the text to show.
async fn slash_command(
    backend: &Backend,
    session: &mut Session,
    last_turn: Option<&str>,
    line: &str,
) -> anyhow::Result<String> {
    match line {
        "/help" => Ok(SLASH_HELP.to_owned()),
        "/tools" => {
            let servers = backend.tools.servers().await;
            Ok(crate::listing::render(backend.config_path(), &backend.tools, &servers))
        }
        "/audit" => match last_turn {
            None => Ok("no turn yet: the first message opens one\n".to_owned()),
            Some(turn) => {
                let which = crate::audit::Which::Turn(turn.to_owned());
                crate::audit::show(backend.audit_url(), &which, &crate::audit::Filter::default(), false).await
            }
        },
        "/reset" => {
            session.reset();
            Ok("(the conversation is forgotten; the next message starts a new one)\n".to_owned())
        }
        other => anyhow::bail!("`{other}` is not a command; /help lists them"),
    }
}

/// `tether prompt`: exactly what the model of `agent` (of `agents`; `None`:
/// a turn no configured agent runs, with the default system prompt) is sent
/// each round besides the conversation — the system prompt and the tools,
/// `run_script`'s stubs included — as the first turn of `ask` or `chat`
/// would have it. No model is asked and no turn is opened in the store.
///
/// # Errors
/// If `agent` is not configured, or two tools share a name.
pub fn prompt(backend: &Backend, agent: Option<&str>, agents: AgentsConfig) -> anyhow::Result<ModelPrompt> {
    let system = match agent {
        None => None,
        Some(name) => match agents.agents.get(name) {
            Some(config) => config.system_prompt.clone(),
            None => {
                let known: Vec<&str> = agents.agents.keys().map(String::as_str).collect();
                anyhow::bail!("no agent `{name}` is configured; the config's agents: {}", known.join(", "))
            }
        },
    };
    let nested: NestedTurnSetup = Arc::new(|_: &str, builder: TurnBuilder| builder);
    let agent_tools = PeerAgents::new(agents, nested, Arc::new(NoAgentEvents)).tools_for(agent)?;
    let builder = Turn::builder("prompt").limits(backend.setup.turn.limits.clone());
    let turn = agent_tools
        .into_iter()
        .fold(backend.setup.equip(builder, &backend.tools, &backend.script), TurnBuilder::add_tool)
        .build()?;
    Ok(ModelPrompt::of(&turn, 0, system.as_deref()))
}

/// `tether ask`: `question` as one turn of a new session with `agent`,
/// shown live on stderr; the answer as [`ask_report`] gives it.
///
/// # Errors
/// If the turn cannot be set up or its audit log read.
pub async fn ask(backend: &Backend, agent: String, agents: AgentsConfig, question: &str) -> anyhow::Result<Value> {
    let live = Arc::new(LiveView::default());
    let mut session = session(backend, agent.clone(), agents.clone(), live.clone(), "ask");
    if backend.parks() {
        let mut owner = backend.owner();
        owner["agent"] = json!(agent);
        owner["agents"] = serde_json::to_value(&agents)?;
        session.park_with(owner);
    }
    let (turn, run, interrupted) = session.send_until(question, crate::interrupt::signal()).await?;
    live.finish_line();
    let Some(signal) = interrupted else { return report(backend, &turn, &run).await };
    let rows = turn.audit_log().await?.len();
    eprintln!("{signal}: the turn was cancelled; audit log: {rows} rows for turn {}", turn.id());
    Err(crate::interrupt::Interrupted { signal, hint: backend.audit_hint(turn.id()) }.into())
}

/// An agent turn that `tether ask --approval later` parked, going on in
/// this process: the session its model-loop record `record` names (its agent
/// and agents; nested turns park as before), shown live on stderr.
#[derive(Debug)]
pub struct ParkedAsk {
    session: Session,
    live: Arc<LiveView>,
}

impl ParkedAsk {
    /// The session of `record`, the top-level turn's model-loop record.
    ///
    /// # Errors
    /// If the record names no agent or its agents do not read.
    pub fn of(backend: &Backend, record: &ParkedRun) -> anyhow::Result<ParkedAsk> {
        let agent = record.owner.get("agent").and_then(Value::as_str).context("the parked turn names no agent")?;
        let agents: AgentsConfig = serde_json::from_value(record.owner.get("agents").cloned().unwrap_or_default())
            .context("the parked turn's agents do not read")?;
        let live = Arc::new(LiveView::default());
        let mut session = session(backend, agent.to_owned(), agents, live.clone(), "ask");
        session.park_with(record.owner.clone());
        Ok(ParkedAsk { session, live })
    }

    /// The agents, offered to each other as tools: the top-level turn's
    /// agent tools, and what resumes a nested turn.
    pub fn peers(&self) -> &PeerAgents {
        &self.session.peers
    }

    /// The agent tools of the top-level turn (a resumed turn needs them as
    /// the one that parked had them).
    ///
    /// # Errors
    /// Never in practice (their schema is fixed).
    pub fn agent_tools(&self) -> anyhow::Result<Vec<Tool>> {
        Ok(self.session.peers.tools_for(Some(&self.session.agent))?)
    }

    /// `tether approve` (or `deny`, `expire`): `answer` — what the call that
    /// waited came to — goes to the model, and the turn goes on from
    /// `record`, its model-loop record, in `turn` (built again from the
    /// record's snapshot) to its answer or its next park. The answer as
    /// `ask` gives it.
    ///
    /// # Errors
    /// If the record's position does not read, or the turn's audit log cannot be read.
    pub async fn resume(
        &self,
        backend: &Backend,
        turn: &Turn,
        record: &ParkedRun,
        answer: &Value,
    ) -> anyhow::Result<Value> {
        let park = AgentPark::of(record).map_err(anyhow::Error::msg)?;
        let agent_loop = self.session.peers.agent_loop(&self.session.agent)?.parking(record.owner.clone());
        let run = agent_loop.resume(turn, park, answer).await;
        self.live.finish_line();
        report(backend, turn, &run).await
    }
}

/// What `ask` and `ParkedAsk::resume` print on stderr after the turn (what waits,
/// if it parked; where its audit rows are), and its answer as JSON.
async fn report(backend: &Backend, turn: &Turn, run: &AgentRun) -> anyhow::Result<Value> {
    if matches!(run.result, Err(AgentError::Parked { .. })) {
        crate::waiting::print_waiting(&*backend.setup.audit, turn.id(), backend.audit_url()).await?;
    }
    eprintln!("audit: {}", backend.audit_hint(turn.id()));
    ask_report(turn, run).await
}

/// `tether ask`'s answer as JSON: the text or why there is none, the turn,
/// every call (from the audit log) and the approval-required actions that
/// may have run when there is no answer.
///
/// # Errors
/// If the turn's audit log cannot be read.
pub async fn ask_report(turn: &Turn, run: &AgentRun) -> anyhow::Result<Value> {
    let calls: Vec<Value> = turn
        .audit_log()
        .await?
        .iter()
        .map(|row| {
            json!({
                "call_id": row.call.call_id,
                "parent_call_id": row.call.parent_call_id,
                "tool": row.call.tool,
                "origin": row.call.origin,
                "depth": row.call.depth,
                "status": row.status.as_str(),
                "code": row.code,
                "script": (row.call.tool == SCRIPT_TOOL_NAME).then(|| crate::audit::code_of(&row.call.args)).flatten(),
            })
        })
        .collect();
    let possibly: Vec<Value> = run
        .possibly_executed
        .iter()
        .map(|e| json!({"call_id": e.call.call_id, "tool": e.call.tool, "args": e.call.args}))
        .collect();
    let (answer, error) = match &run.result {
        Ok(text) => (Value::String(text.clone()), Value::Null),
        Err(error) => (Value::Null, Value::String(error.to_string())),
    };
    Ok(json!({
        "ok": run.result.is_ok(),
        "parked": matches!(run.result, Err(AgentError::Parked { .. })),
        "answer": answer,
        "error": error,
        "turn_id": turn.id(),
        "model_requests": run.model_requests,
        "calls": calls,
        "possibly_executed_approval_actions": possibly,
    }))
}

/// Shows an agent turn live on stderr: the model's text as it streams, each
/// tool call it makes, and nested agent turns, indented by depth; on a
/// terminal, a spinner while the model thinks (from its request to its first
/// text or call). (The calls scripts make are shown by the turn's own events.)
#[derive(Debug, Default)]
pub struct LiveView {
    /// Whether the last thing printed was streamed text without a newline.
    mid_line: std::sync::Mutex<bool>,
}

impl LiveView {
    /// Prints `text` on a line of its own (after ending streamed text), or
    /// with `None` only ends streamed text; one lock, so tokens never
    /// interleave with it.
    fn end_line_then(&self, text: Option<&str>) {
        crate::paint::spinner().stop();
        let mut mid = self.mid_line.lock().unwrap_or_else(|p| p.into_inner());
        let mut err = std::io::stderr().lock();
        if std::mem::take(&mut *mid) {
            let _ = writeln!(err);
        }
        if let Some(text) = text {
            let _ = writeln!(err, "{text}");
        }
    }

    fn line(&self, text: &str) {
        self.end_line_then(Some(text));
    }

    /// Starts the line the answer streams on with `prefix` (e.g. `main> `).
    pub fn begin_answer(&self, prefix: &str) {
        crate::paint::spinner().line_starts_with(prefix);
    }

    /// Ends streamed text with a newline, if it is mid-line.
    pub fn finish_line(&self) {
        self.end_line_then(None);
    }
}

impl AgentEventSink for LiveView {
    fn emit(&self, event: &AgentEvent) {
        match event {
            AgentEvent::ModelRequest { .. } => crate::paint::spinner().start("thinking"),
            AgentEvent::Token { text, .. } => {
                crate::paint::spinner().stop();
                let mut mid = self.mid_line.lock().unwrap_or_else(|p| p.into_inner());
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "{text}");
                let _ = err.flush();
                *mid = !text.ends_with('\n');
            }
            AgentEvent::ToolCallStarted { call_id, tool, depth, .. } => {
                self.line(&format!("{}⇢ model calls {tool} ({call_id})", "    ".repeat(*depth as usize)));
            }
            AgentEvent::ToolCallFinished { .. } => {}
            AgentEvent::NestedTurnStarted { agent, depth, .. } => {
                self.line(&format!(
                    "{}⇢ agent `{agent}` starts a turn",
                    "    ".repeat(depth.saturating_sub(1) as usize)
                ));
            }
            AgentEvent::NestedTurnFinished { agent, answered, .. } => {
                let how = if *answered { "answered" } else { "gave no answer" };
                self.line(&format!("  ⇠ agent `{agent}` {how}"));
            }
        }
    }
}
