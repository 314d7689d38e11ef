//! Kind `http`: a request the BACKEND makes — never the sandbox — to a URL
//! template filled from the call's arguments.
//!
//! ```toml
//! [[tools]]
//! name = "weather"
//! kind = "http"
//! description = "Today's weather in a city: temperature, wind."
//! method = "GET"                                        # default GET
//! url = "https://api.example.com/v1/weather/{city}{?units}"
//! headers = { Authorization = "Bearer ${WEATHER_TOKEN}" } # ${NAME}: the backend's environment
//! body = "none"                  # "json": the arguments the URL does not use, as a JSON object
//! max_output_bytes = 1048576     # default 4 MiB
//! ```
//!
//! The URL is an RFC 6570 template (`iri-string`): `{city}` is
//! percent-encoded, so an argument cannot change the host or the path's
//! shape; `{+path}` (reserved expansion) is the administrator's explicit
//! choice. A 2xx answer gives its JSON (text if it is not JSON, `null` if
//! empty); any other status a `tool_failed` value with the status and the
//! start of the body.

use super::error::ConfigError;
use super::read::At;
use iri_string::spec::UriSpec;
use iri_string::template::UriTemplateStr;
use iri_string::template::simple_context::{SimpleContext, Value as TemplateValue};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tether_codes::Reason;
use tether_turn::{ToolContext, ToolError, ToolExecutor, ToolOutput};

/// The kind's own keys.
pub(crate) const KEYS: [&str; 5] = ["url", "method", "headers", "body", "max_output_bytes"];

/// The most bytes of output a tool hands back unless it says otherwise.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;

/// How much of an error body a failure value quotes.
const ERROR_BODY_BYTES: usize = 1024;

#[derive(Debug, Deserialize)]
struct Raw {
    url: Option<String>,
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<BodyMode>,
    max_output_bytes: Option<u64>,
}

/// `body = "json" | "none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BodyMode {
    /// The arguments the URL template does not use, as a JSON object.
    Json,
    /// No body.
    None,
}

/// An `http` tool's keys, checked.
#[derive(Debug, Clone)]
pub(crate) struct HttpConfig {
    url: String,
    variables: Vec<String>,
    method: reqwest::Method,
    headers: HeaderMap,
    body: BodyMode,
    max_output_bytes: u64,
}

impl HttpConfig {
    pub(crate) fn read(at: &At<'_>, table: &toml::Table) -> Result<HttpConfig, ConfigError> {
        let raw: Raw = at.read(table, &KEYS)?;
        let Some(url) = raw.url else {
            return Err(at
                .error("url", "is missing")
                .fix("write the URL template, e.g. `url = \"https://host/v1/items/{id}\"`"));
        };
        let url = at.expand("url", &url)?;
        let template = UriTemplateStr::new(&url).map_err(|e| {
            at.error("url", format!("is not a URL template ({e})")).fix("write `{name}` for an argument (RFC 6570)")
        })?;
        let mut variables: Vec<String> = template.variables().map(|v| v.as_str().to_owned()).collect();
        variables.dedup();
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok {
            return Err(at
                .error("url", format!("`{url}` is not an http(s) URL"))
                .fix("start it with `https://` (or `http://`)"));
        }
        let method_text = raw.method.unwrap_or_else(|| "GET".into()).to_ascii_uppercase();
        let method = match method_text.as_str() {
            "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" => {
                reqwest::Method::from_bytes(method_text.as_bytes()).map_err(|e| at.error("method", e.to_string()))?
            }
            other => {
                return Err(at
                    .error("method", format!("`{other}` is not supported"))
                    .fix("write GET, POST, PUT, PATCH, DELETE or HEAD"));
            }
        };
        let mut headers = HeaderMap::new();
        for (name, value) in raw.headers {
            let (name, value) = header(at, &name, &value)?;
            headers.insert(name, value);
        }
        let body = raw.body.unwrap_or(if matches!(method_text.as_str(), "POST" | "PUT" | "PATCH") {
            BodyMode::Json
        } else {
            BodyMode::None
        });
        Ok(HttpConfig {
            url,
            variables,
            method,
            headers,
            body,
            max_output_bytes: raw.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
        })
    }

    /// The URL's variables, any scalar each; with a JSON body, other
    /// arguments too.
    pub(crate) fn default_input_schema(&self) -> Value {
        let properties: Map<String, Value> = self
            .variables
            .iter()
            .map(|v| (v.clone(), json!({"type": ["string", "number", "integer", "boolean"]})))
            .collect();
        json!({"type": "object", "properties": properties, "additionalProperties": self.body == BodyMode::Json})
    }

    /// An HTTP request may have effects: not read-only unless the config says so.
    pub(crate) fn read_only_default(&self) -> bool {
        false
    }

    /// The origin, for messages: never the path or query, which may hold
    /// arguments or keys.
    fn origin(&self) -> String {
        let after_scheme = self.url.find("://").map_or(0, |i| i + 3);
        let end = self.url[after_scheme..].find(['/', '?', '{']).map_or(self.url.len(), |i| after_scheme + i);
        format!("the HTTP endpoint `{}`", &self.url[..end])
    }

    pub(crate) fn executor(&self, tool: &str, client: reqwest::Client) -> Arc<dyn ToolExecutor> {
        Arc::new(HttpTool { tool: tool.to_owned(), config: self.clone(), client })
    }
}

/// `headers.<name> = value` of `at`'s entry, `${NAME}` expanded; the value
/// is marked sensitive, so it never shows in logs or `Debug` output (it may
/// be a secret).
pub(crate) fn header(at: &At<'_>, name: &str, value: &str) -> Result<(HeaderName, HeaderValue), ConfigError> {
    let key = format!("headers.{name}");
    let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| at.error(&key, "is not a valid header name"))?;
    let mut value = HeaderValue::from_str(&at.expand(&key, value)?)
        .map_err(|_| at.error(&key, "is not a valid header value (no line breaks or control characters)"))?;
    value.set_sensitive(true);
    Ok((header, value))
}

struct HttpTool {
    tool: String,
    config: HttpConfig,
    client: reqwest::Client,
}

/// A JSON argument as a URI template value: strings as they are, lists and
/// objects as RFC 6570 lists and associative arrays, `null` undefined.
fn template_value(value: &Value) -> TemplateValue {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match value {
        Value::Null => TemplateValue::Undefined,
        Value::Array(items) => TemplateValue::List(items.iter().map(text).collect()),
        Value::Object(map) => TemplateValue::Assoc(map.iter().map(|(k, v)| (k.clone(), text(v))).collect()),
        other => TemplateValue::String(text(other)),
    }
}

impl HttpTool {
    fn lost(&self, detail: String) -> ToolError {
        ToolError::around(&Reason::ProviderLost { tool: self.tool.clone(), provider: self.config.origin(), detail })
    }

    fn request(&self, args: &Value) -> Result<reqwest::RequestBuilder, ToolError> {
        let empty = Map::new();
        let args = args.as_object().unwrap_or(&empty);
        let mut context = SimpleContext::new();
        for (name, value) in args {
            context.insert(name.as_str(), template_value(value));
        }
        let url = UriTemplateStr::new(&self.config.url)
            .and_then(|t| t.expand::<UriSpec, _>(&context).map(|e| e.to_string()))
            .map_err(|e| {
                ToolError::reported(&Reason::ToolReported {
                    tool: self.tool.clone(),
                    detail: format!("the URL could not be filled in: {e}"),
                })
            })?;
        let mut request = self.client.request(self.config.method.clone(), url).headers(self.config.headers.clone());
        if self.config.body == BodyMode::Json {
            let body: Map<String, Value> = args
                .iter()
                .filter(|(k, _)| !self.config.variables.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            request = request.header(CONTENT_TYPE, "application/json").body(Value::Object(body).to_string());
        }
        Ok(request)
    }

    /// Reads the body, at most `max_output_bytes` of it.
    async fn body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ToolError> {
        let limit = self.config.max_output_bytes;
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if (body.len() + chunk.len()) as u64 > limit {
                        return Err(ToolError::around(&Reason::OutputTooLarge { tool: self.tool.clone(), limit }));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body),
                Err(e) => return Err(self.lost(format!("the response broke off: {e}"))),
            }
        }
    }
}

#[async_trait::async_trait]
impl ToolExecutor for HttpTool {
    async fn execute(&self, _context: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let response = match self.request(&args)?.send().await {
            Ok(response) => response,
            Err(e) if e.is_connect() => {
                return Err(ToolError::around(&Reason::ProviderUnavailable {
                    tool: self.tool.clone(),
                    provider: self.config.origin(),
                    error: format!("cannot connect: {}", error_chain(&e)),
                }));
            }
            Err(e) => return Err(self.lost(error_chain(&e))),
        };
        let status = response.status();
        let body = self.body(response).await?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let cut = super::text::head(text.trim(), ERROR_BODY_BYTES);
            let detail = if cut.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {cut}") };
            return Err(ToolError::reported(&Reason::ToolReported { tool: self.tool.clone(), detail }));
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(ToolOutput::new(Value::Null));
        }
        match serde_json::from_slice(&body) {
            Ok(value) => Ok(ToolOutput::new(value)),
            Err(_) => match String::from_utf8(body) {
                Ok(text) => Ok(ToolOutput::new(Value::String(text))),
                Err(_) => Err(ToolError::around(&Reason::InvalidResult {
                    tool: self.tool.clone(),
                    problem: "the response is neither JSON nor text".into(),
                })),
            },
        }
    }
}

/// An error with its causes: reqwest's own message is often just
/// "error sending request".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vars::Vars;
    use std::path::Path;

    fn read(toml_text: &str) -> Result<HttpConfig, ConfigError> {
        let vars = Vars::from_env().set("TETHER_TEST_TOKEN", "s3cret");
        let at = At { file: Path::new("t.toml"), key: "tools[0]".into(), vars: &vars };
        HttpConfig::read(&at, &toml_text.parse().unwrap())
    }

    #[test]
    fn the_url_is_a_template_and_headers_come_from_the_environment() {
        let config = read("url = \"https://api.example.com/v1/{city}{?units}\"\nheaders = { Authorization = \"Bearer ${TETHER_TEST_TOKEN}\" }").unwrap();
        assert_eq!(config.variables, ["city", "units"]);
        assert_eq!(config.method, reqwest::Method::GET);
        assert_eq!(config.body, BodyMode::None);
        assert_eq!(config.headers["authorization"], "Bearer s3cret");
        assert!(!format!("{config:?}").contains("s3cret"), "a secret header never reaches Debug output");
        assert_eq!(config.origin(), "the HTTP endpoint `https://api.example.com`");
        assert_eq!(config.default_input_schema()["additionalProperties"], false);
        let post = read("url = \"http://h/x\"\nmethod = \"post\"").unwrap();
        assert_eq!(post.body, BodyMode::Json, "a POST sends the arguments as JSON by default");
    }

    #[test]
    fn bad_http_entries_say_what_to_write() {
        let missing = read("method = \"GET\"").unwrap_err().to_string();
        assert!(missing.contains("`tools[0].url`: is missing"), "{missing}");
        let scheme = read("url = \"ftp://h/x\"").unwrap_err().to_string();
        assert!(scheme.contains("is not an http(s) URL"), "{scheme}");
        let method = read("url = \"http://h\"\nmethod = \"BREW\"").unwrap_err().to_string();
        assert!(method.contains("`BREW` is not supported; write GET, POST"), "{method}");
        let var = read("url = \"http://h\"\nheaders = { X = \"${TETHER_UNSET_FOR_TEST}\" }").unwrap_err().to_string();
        assert!(
            var.contains("`tools[0].headers.X`: the environment variable `TETHER_UNSET_FOR_TEST` is not set"),
            "{var}"
        );
        let template = read("url = \"http://h/{unclosed\"").unwrap_err().to_string();
        assert!(template.contains("is not a URL template"), "{template}");
    }

    #[test]
    fn arguments_are_percent_encoded_into_the_url() {
        let mut context = SimpleContext::new();
        context.insert("city", template_value(&json!("São Paulo/../admin")));
        context.insert("tags", template_value(&json!(["a", "b c"])));
        let url = UriTemplateStr::new("https://h/w/{city}{?tags*}")
            .unwrap()
            .expand::<UriSpec, _>(&context)
            .unwrap()
            .to_string();
        assert_eq!(url, "https://h/w/S%C3%A3o%20Paulo%2F..%2Fadmin?tags=a&tags=b%20c");
    }
}
