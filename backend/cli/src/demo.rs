//! The demo world's data: issues, customers' contracts, fixed so every run
//! (and every test) sees the same world. `tether demo` seeds a SQLite
//! database with it (`demo_db`) and serves it through the tools of
//! `examples/demo.toml`; [`DemoWorld::execute`] answers the same three tools
//! in memory, for tests that drive a sidecar without a turn.

use serde_json::{Value, json};
use std::sync::Mutex;
use tether_backend::{ToolDef, ToolOutcome};

/// The demo's "today"; the script gets it as `input["today"]`.
pub const TODAY: &str = "2026-11-30";
/// The start of "last week"; the script gets it as `input["week_start"]`.
pub const WEEK_START: &str = "2026-11-23";

/// The demo script, one call at a time.
pub const SCRIPT: &str = include_str!("../../../examples/contracts.py");
/// The demo script with its look-ups batched under `asyncio.gather`.
pub const SCRIPT_GATHER: &str = include_str!("../../../examples/contracts_gather.py");

/// One issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// `ISS-<n>`.
    pub id: String,
    /// Its title.
    pub title: String,
    /// The customer who opened it.
    pub customer_id: String,
    /// The day it was opened, ISO 8601.
    pub opened: String,
}

/// One customer's contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// The customer id.
    pub customer_id: String,
    /// The customer's name.
    pub customer: String,
    /// The last day of the contract, ISO 8601.
    pub end_date: String,
    /// Who owns the account.
    pub owner_email: String,
}

/// An email the demo's `send_email` tool "sent".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// The recipient.
    pub to: String,
    /// The subject.
    pub subject: String,
}

/// The demo's data and its outbox.
#[derive(Debug)]
pub struct DemoWorld {
    issues: Vec<Issue>,
    contracts: Vec<Contract>,
    outbox: Mutex<Vec<Email>>,
}

const CUSTOMERS: [(&str, &str, &str, &str); 8] = [
    ("c1", "Acme Corp", "2026-06-30", "dana@example.com"),
    ("c2", "Globex", "2027-03-31", "li@example.com"),
    ("c3", "Initech", "2026-11-15", "sam@example.com"),
    ("c4", "Umbrella", "2027-12-31", "ana@example.com"),
    ("c5", "Hooli", "2026-11-29", "raj@example.com"),
    ("c6", "Vandelay", "2028-01-31", "kim@example.com"),
    ("c7", "Stark Industries", "2026-12-01", "ola@example.com"),
    // c8 has no contract on file: `get_contract` fails for it.
    ("c8", "Wayne Enterprises", "", ""),
];

const TITLES: [&str; 6] =
    ["Login fails", "Export is slow", "Invoice total wrong", "API returns 500", "Missing audit entries", "SSO loop"];

impl Default for DemoWorld {
    fn default() -> Self {
        // 24 issues over two weeks: day 16..29 of November, customers in rotation.
        let issues = (0..24)
            .map(|n| Issue {
                id: format!("ISS-{}", 100 + n),
                title: TITLES[n % TITLES.len()].to_owned(),
                customer_id: CUSTOMERS[(n * 3) % CUSTOMERS.len()].0.to_owned(),
                opened: format!("2026-11-{:02}", 16 + (n * 3) % 14),
            })
            .collect();
        let contracts = CUSTOMERS
            .iter()
            .filter(|(_, _, end, _)| !end.is_empty())
            .map(|&(id, name, end, owner)| Contract {
                customer_id: id.into(),
                customer: name.into(),
                end_date: end.into(),
                owner_email: owner.into(),
            })
            .collect();
        DemoWorld { issues, contracts, outbox: Mutex::new(Vec::new()) }
    }
}

impl DemoWorld {
    /// The three tools, as the model (and so the script) sees them.
    pub fn tools() -> Vec<ToolDef> {
        vec![
            ToolDef::new(
                "list_issues",
                "List issues opened on or after a day.",
                json!({
                    "type": "object",
                    "properties": {"opened_after": {"type": "string", "description": "ISO day, inclusive"}},
                    "required": ["opened_after"],
                    "additionalProperties": false
                }),
            ),
            ToolDef::new(
                "get_contract",
                "Look up a customer's contract: customer, end_date, owner_email.",
                json!({
                    "type": "object",
                    "properties": {"customer_id": {"type": "string"}},
                    "required": ["customer_id"],
                    "additionalProperties": false
                }),
            ),
            ToolDef::new(
                "send_email",
                "Send an email. Has effects; needs approval where policy says so.",
                json!({
                    "type": "object",
                    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
                    "required": ["to", "subject", "body"],
                    "additionalProperties": false
                }),
            ),
        ]
    }

    /// Every customer: id and name (one has no contract).
    pub fn customers() -> Vec<(&'static str, &'static str)> {
        CUSTOMERS.iter().map(|&(id, name, _, _)| (id, name)).collect()
    }

    /// The issues, oldest first.
    pub fn issues(&self) -> &[Issue] {
        &self.issues
    }

    /// The contracts on file.
    pub fn contracts(&self) -> &[Contract] {
        &self.contracts
    }

    /// The script's input: today and the start of last week.
    pub fn input() -> Value {
        json!({"today": TODAY, "week_start": WEEK_START})
    }

    /// Runs a demo tool. Arguments are assumed valid (a backend checks them
    /// against the schema first); missing ones are treated as empty.
    pub fn execute(&self, tool: &str, args: &Value) -> ToolOutcome {
        let arg = |name: &str| args.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        match tool {
            "list_issues" => {
                let since = arg("opened_after");
                let issues: Vec<Value> = self
                    .issues_since(&since)
                    .map(|i| json!({"id": i.id, "title": i.title, "customer_id": i.customer_id, "opened": i.opened}))
                    .collect();
                ToolOutcome::Ok(Value::Array(issues))
            }
            "get_contract" => {
                let customer_id = arg("customer_id");
                match self.contracts.iter().find(|c| c.customer_id == customer_id) {
                    Some(c) => ToolOutcome::Ok(json!({
                        "customer_id": c.customer_id, "customer": c.customer,
                        "end_date": c.end_date, "owner_email": c.owner_email
                    })),
                    None => {
                        ToolOutcome::failed("not_found", format!("no contract on file for customer `{customer_id}`"))
                    }
                }
            }
            "send_email" => {
                let mut outbox = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
                outbox.push(Email { to: arg("to"), subject: arg("subject") });
                ToolOutcome::Ok(json!({"message_id": format!("msg-{}", outbox.len())}))
            }
            other => ToolOutcome::failed("tool_not_found", format!("there is no tool `{other}`")),
        }
    }

    fn issues_since<'a>(&'a self, since: &'a str) -> impl Iterator<Item = &'a Issue> + 'a {
        self.issues.iter().filter(move |i| i.opened.as_str() >= since)
    }

    /// The emails sent so far.
    pub fn outbox(&self) -> Vec<Email> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What the demo script must conclude, computed here independently:
    /// (issues checked, issues whose contract ended, issues with no contract).
    pub fn expected_summary(&self) -> (usize, Vec<String>, Vec<String>) {
        let mut emailed = Vec::new();
        let mut no_contract = Vec::new();
        let mut checked = 0;
        for issue in self.issues_since(WEEK_START) {
            checked += 1;
            match self.contracts.iter().find(|c| c.customer_id == issue.customer_id) {
                Some(c) if c.end_date.as_str() < TODAY => emailed.push(issue.id.clone()),
                Some(_) => {}
                None => no_contract.push(issue.id.clone()),
            }
        }
        (checked, emailed, no_contract)
    }

    /// The distinct customers of last week's issues.
    pub fn customers_last_week(&self) -> Vec<String> {
        let mut customers: Vec<String> = self.issues_since(WEEK_START).map(|i| i.customer_id.clone()).collect();
        customers.sort();
        customers.dedup();
        customers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_has_every_kind_of_issue() {
        let world = DemoWorld::default();
        let (checked, emailed, no_contract) = world.expected_summary();
        assert!(checked >= 10, "last week has enough issues to make the chain worth a script");
        assert!(!emailed.is_empty() && emailed.len() < checked, "some contracts ended, some did not");
        assert!(!no_contract.is_empty(), "one customer has no contract");
    }
}
