//! An MCP server for the tool-source tests' failure cases, built on rmcp's
//! server side. It speaks MCP on stdio, or — with `--http 127.0.0.1:0` — as
//! a streamable HTTP server at `/mcp`, printing `listening on <url>` first.
//!
//! Tools: `add` (structured result with an output schema), `echo` (text),
//! `fail` (an `isError` result), `slow` (waits `ms`), `huge` (`bytes` of
//! text), `die` (the process exits mid-call), `pid` (the process id, to see
//! a restart), `count` (`steps` progress notifications, each step taking `ms`).

#![allow(missing_docs)]

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ProgressNotificationParam, RequestMetaObject, ServerCapabilities, ServerConfig,
};
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::tower::StreamableHttpService;
use rmcp::{Json, Peer, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Deserialize, JsonSchema)]
struct AddRequest {
    a: i64,
    b: i64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: i64,
}

#[derive(Deserialize, JsonSchema)]
struct Text {
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct Millis {
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct Steps {
    steps: u32,
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct Bytes {
    bytes: usize,
}

#[derive(Clone)]
struct TestServer {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl TestServer {
    fn new() -> Self {
        TestServer { tool_router: Self::tool_router() }
    }

    #[tool(description = "Adds two integers: {sum}.")]
    async fn add(&self, Parameters(AddRequest { a, b }): Parameters<AddRequest>) -> Json<Sum> {
        Json(Sum { sum: a + b })
    }

    #[tool(description = "Returns its text.")]
    async fn echo(&self, Parameters(Text { text }): Parameters<Text>) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }

    #[tool(description = "Reports a failure with its text.")]
    async fn fail(&self, Parameters(Text { text }): Parameters<Text>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(text)])
    }

    #[tool(description = "Waits `ms` milliseconds, then answers.")]
    async fn slow(&self, Parameters(Millis { ms }): Parameters<Millis>) -> CallToolResult {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        CallToolResult::success(vec![ContentBlock::text(format!("waited {ms} ms"))])
    }

    #[tool(description = "Returns `bytes` bytes of text.")]
    async fn huge(&self, Parameters(Bytes { bytes }): Parameters<Bytes>) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text("x".repeat(bytes))])
    }

    #[tool(description = "Ends this server's process in the middle of the call.")]
    async fn die(&self) -> CallToolResult {
        eprintln!("dying on purpose in the middle of a call");
        std::process::exit(3)
    }

    #[tool(description = "Counts to `steps`, each step taking `ms`, reporting each as progress.")]
    async fn count(
        &self,
        Parameters(Steps { steps, ms }): Parameters<Steps>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> CallToolResult {
        let token = meta.get_progress_token();
        // Each step is reported as it begins, then worked on for `ms`.
        for step in 1..=steps {
            if let Some(token) = &token {
                let update = ProgressNotificationParam::new(token.clone(), f64::from(step))
                    .with_total(f64::from(steps))
                    .with_message(format!("step {step}"));
                if client.notify_progress(update).await.is_err() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let asked = if token.is_some() { "reported" } else { "not asked for" };
        CallToolResult::success(vec![ContentBlock::text(format!("counted to {steps}, progress {asked}"))])
    }

    #[tool(description = "This server's process id.")]
    async fn pid(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(std::process::id().to_string())])
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--http") => {
            let address = args.get(2).map_or("127.0.0.1:0", String::as_str);
            let service: StreamableHttpService<TestServer, LocalSessionManager> = StreamableHttpService::new(
                || Ok(TestServer::new()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default().with_sse_keep_alive(None),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(address).await?;
            println!("listening on http://{}/mcp", listener.local_addr()?);
            axum::serve(listener, router).await?;
        }
        _ => {
            let running = TestServer::new().serve(rmcp::transport::stdio()).await?;
            running.waiting().await?;
        }
    }
    Ok(())
}
