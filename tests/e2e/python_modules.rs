//! Standard modules and class features real scripts use (issue 25, item 2),
//! added to monty by third_party/monty's patches: each test runs a short agent-style script
//! through the real sidecar and the Python guest, over data a tool returned,
//! and checks the values CPython 3.11 gives for the same script.

use crate::support::*;
use tether_backend::pb;

/// Runs `source` over the demo and test tools; the run must succeed.
async fn result_of(source: &str) -> serde_json::Value {
    let (_sidecar, client) = sidecar().await;
    let (outcome, _) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    outcome.result.expect("a finished run has a result")
}

/// `string` (patch 0005): the character-class constants and `capwords`.
#[tokio::test]
async fn string_constants_and_capwords_work_on_tool_data() {
    let source = "import string\n\
                  from string import capwords\n\
                  r = echo(names=['ada  lovelace', 'alan turing'], code='AB-12x')\n\
                  names = r['value']['names']\n\
                  code = r['value']['code']\n\
                  ok = all(c in string.ascii_uppercase + string.digits + '-' for c in code)\n\
                  hexed = [c for c in 'c0ffee!' if c in string.hexdigits]\n\
                  {'names': [capwords(n) for n in names], 'dash': capwords('a-b', '-'), 'ok': ok,\n \
                   'hex': ''.join(hexed), 'punct': sum(c in string.punctuation for c in 'hi, there!'),\n \
                   'printable': len(string.printable), 'ws': string.whitespace}";
    assert_eq!(
        result_of(source).await,
        serde_json::json!({
            "names": ["Ada Lovelace", "Alan Turing"], "dash": "A-B", "ok": false,
            "hex": "c0ffee", "punct": 2, "printable": 100, "ws": " \t\n\r\u{b}\u{c}"
        })
    );
}

/// `heapq` (patch 0006): a priority queue and the top-N helpers.
#[tokio::test]
async fn heapq_orders_a_priority_queue_and_picks_the_top_n() {
    let source = "import heapq\n\
                  r = echo(tickets=[{'id': 1, 'p': 3}, {'id': 2, 'p': 1}, {'id': 3, 'p': 2}, {'id': 4, 'p': 1}])\n\
                  tickets = r['value']['tickets']\n\
                  queue = []\n\
                  for t in tickets:\n    heapq.heappush(queue, (t['p'], t['id']))\n\
                  order = [heapq.heappop(queue)[1] for _ in range(len(queue))]\n\
                  h = [5, 3, 8, 1, 9, 2]\n\
                  heapq.heapify(h)\n\
                  layout = list(h)\n\
                  top = heapq.heapreplace(h, 7)\n\
                  try:\n    heapq.heappop([])\n    empty = None\nexcept IndexError as e:\n    empty = str(e)\n\
                  {'order': order, 'layout': layout, 'top': top, 'pushpop': heapq.heappushpop(h, 0),\n \
                   'urgent': [t['id'] for t in heapq.nsmallest(2, tickets, key=lambda t: t['p'])],\n \
                   'largest': heapq.nlargest(3, [4, 1, 7, 3, 7, 2]), 'empty': empty}";
    assert_eq!(
        result_of(source).await,
        serde_json::json!({
            "order": [2, 4, 3, 1], "layout": [1, 3, 2, 5, 9, 8], "top": 1, "pushpop": 0,
            "urgent": [2, 4], "largest": [7, 7, 4], "empty": "index out of range"
        })
    );
}

/// Patches 0021-0023: a plain class's `__len__` and `__lt__` (truthiness,
/// `sorted`, `min`, the reflected `>`), a function's `__name__` in a logging
/// decorator, and `date.isocalendar()`.
#[tokio::test]
async fn len_ordering_dunders_function_names_and_iso_weeks_work_on_tool_data() {
    let source = r#"
from datetime import date
calls = []
def logged(fn):
    def wrapper(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)
    return wrapper
class Account:
    def __init__(self, name, score):
        self.name = name
        self.score = score
    def __lt__(self, other):
        return self.score < other.score
class Batch:
    def __init__(self, items):
        self.items = items
    def __len__(self):
        return len(self.items)
@logged
def fetch(names):
    return echo(accounts=[{'name': n, 'score': len(n) * 7 % 5} for n in names])['value']['accounts']
rows = fetch(['acme', 'globex', 'initech', 'umbrella'])
accounts = sorted(Account(r['name'], r['score']) for r in rows)
worst = min(accounts)
batch = Batch([a for a in accounts if a.score < 3])
week = date.fromisoformat('2026-12-04').isocalendar()
{'order': [a.name for a in accounts], 'worst': worst.name, 'batch': len(batch), 'empty': bool(Batch([])),
 'beats': accounts[-1] > accounts[0], 'calls': calls, 'week': [week.year, week.week, week.weekday]}
"#;
    assert_eq!(
        result_of(source).await,
        serde_json::json!({
            "batch": 2, "beats": true, "calls": ["fetch"], "empty": false,
            "order": ["umbrella", "globex", "acme", "initech"], "week": [2026, 49, 5], "worst": "umbrella"
        })
    );
}
