//! Standard modules and class features real scripts use (issue 25, item 2),
//! added to monty by third_party/monty's patches: each test runs a short agent-style script
//! through the real sidecar and the Python guest, over data a tool returned,
//! and checks the values CPython 3.11 gives for the same script (taken from
//! a CPython run of the script with `echo` returning `{'value': kwargs}`).

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

/// Patch 0026: `io.StringIO` as the file `csv` reads a tool's CSV text from and writes to, and `print(file=)`.
#[tokio::test]
async fn io_stringio_carries_csv_text_in_and_out_of_a_script() {
    let source = r#"
import csv, io
r = echo(csv='name,amount\nacme,120\nglobex,80\n')
rows = list(csv.DictReader(io.StringIO(r['value']['csv'])))
out = io.StringIO()
w = csv.writer(out)
w.writerow(['name', 'double'])
for row in rows:
    w.writerow([row['name'], int(row['amount']) * 2])
print('total', sum(int(x['amount']) for x in rows), file=out)
buf = io.StringIO('a\nb\n')
{'rows': rows, 'csv': out.getvalue(), 'lines': buf.readlines(), 'pos': buf.tell()}
"#;
    let cpython: serde_json::Value = serde_json::from_str(r#"{"csv": "name,double\r\nacme,240\r\nglobex,160\r\ntotal 200\n", "lines": ["a\n", "b\n"], "pos": 4, "rows": [{"amount": "120", "name": "acme"}, {"amount": "80", "name": "globex"}]}"#).expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patch 0027: `fill`, `shorten`, `wrap` with its options, `dedent`, `indent`.
#[tokio::test]
async fn textwrap_formats_tool_text_as_cpython_does() {
    let source = r#"
import textwrap
r = echo(body='The contract for Acme Corporation ended last week; please reach out to the account owner to discuss renewal options.', title='Quarterly business review with the extended leadership team')
body = r['value']['body']
{'fill': textwrap.fill(body, width=40), 'short': textwrap.shorten(r['value']['title'], width=30),
 'wrap': textwrap.wrap(body, 50, initial_indent='> ', subsequent_indent='  ', max_lines=2),
 'dedent': textwrap.dedent('    Hi,\n      thanks\n    Bye\n'), 'indent': textwrap.indent('a\n\nb', '| ')}
"#;
    let cpython: serde_json::Value = serde_json::from_str(r#"{"dedent": "Hi,\n  thanks\nBye\n", "fill": "The contract for Acme Corporation ended\nlast week; please reach out to the\naccount owner to discuss renewal\noptions.", "indent": "| a\n\n| b", "short": "Quarterly business [...]", "wrap": ["> The contract for Acme Corporation ended last", "  week; please reach out to the account [...]"]}"#).expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patch 0028: `itemgetter`, `attrgetter`, `methodcaller` and the operator functions.
#[tokio::test]
async fn operator_getters_sort_and_reduce_tool_data() {
    let source = r#"
import functools, operator
from operator import attrgetter, itemgetter, methodcaller
r = echo(issues=[{'id': 3, 'due': '2026-12-09', 'owner': 'bo'}, {'id': 1, 'due': '2026-12-01', 'owner': 'al'}, {'id': 2, 'due': '2026-12-01', 'owner': 'cy'}])
issues = r['value']['issues']
class P:
    def __init__(self, name):
        self.name = name
{'by_due': [i['id'] for i in sorted(issues, key=itemgetter('due', 'id'))], 'pair': itemgetter('id', 'owner')(issues[0]),
 'product': functools.reduce(operator.mul, [i['id'] for i in issues]), 'upper': list(map(methodcaller('upper'), ['a', 'b'])),
 'names': sorted(map(attrgetter('name'), [P('z'), P('y')])), 'repr': repr(itemgetter(1)), 'add': operator.add('x', 'y')}
"#;
    let cpython: serde_json::Value = serde_json::from_str(r#"{"add": "xy", "by_due": [1, 2, 3], "names": ["y", "z"], "pair": [3, "bo"], "product": 6, "repr": "operator.itemgetter(1)", "upper": ["A", "B"]}"#).expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patch 0029: exact averages and spread (an int mean stays an int), quantiles, `StatisticsError`.
#[tokio::test]
async fn statistics_summarises_tool_numbers_exactly() {
    let source = r#"
import statistics
r = echo(latencies=[120, 95, 310, 101, 99, 130, 87])
xs = r['value']['latencies']
try:
    statistics.mean([])
    empty = None
except statistics.StatisticsError as e:
    empty = str(e)
{'mean': statistics.mean(xs), 'median': statistics.median(xs), 'stdev': round(statistics.stdev(xs), 6),
 'pstdev': statistics.pstdev([1, 2, 3, 4]), 'quartiles': statistics.quantiles(xs, n=4), 'mode': statistics.mode([1, 2, 2, 3]),
 'int_mean': statistics.mean([1, 2, 3]), 'fmean': statistics.fmean([0.1, 0.2, 0.3]), 'empty': empty}
"#;
    let cpython: serde_json::Value = serde_json::from_str(r#"{"empty": "mean requires at least one data point", "fmean": 0.19999999999999998, "int_mean": 2, "mean": 134.57142857142858, "median": 101, "mode": 2, "pstdev": 1.118033988749895, "quartiles": [95.0, 101.0, 130.0], "stdev": 78.77152}"#).expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patch 0030: `urllib.parse` imported three ways, quoting, query strings, URL parts and joins.
#[tokio::test]
async fn urllib_parse_builds_and_reads_urls() {
    let source = r#"
import urllib.parse
from urllib.parse import quote, urlencode, urljoin, urlparse, parse_qs
r = echo(base='https://api.example.com/v1/items?page=2&tag=a&tag=b#top', q='café & co')
u = urlparse(r['value']['base'])
{'query': urlencode({'q': r['value']['q'], 'limit': 10}), 'quote': quote('a b/c'), 'host': u.hostname, 'path': u.path,
 'qs': parse_qs(u.query), 'join': urljoin(r['value']['base'], '../v2/other'), 'unquote': urllib.parse.unquote_plus('caf%C3%A9+%26+co'),
 'port': urlparse('http://h:8080/').port, 'parts': list(urllib.parse.urlsplit('http://a/b?c#d'))}
"#;
    let cpython: serde_json::Value = serde_json::from_str(r#"{"host": "api.example.com", "join": "https://api.example.com/v2/other", "parts": ["http", "a", "/b", "c", "d"], "path": "/v1/items", "port": 8080, "qs": {"page": ["2"], "tag": ["a", "b"]}, "query": "q=caf%C3%A9+%26+co&limit=10", "quote": "a%20b/c", "unquote": "caf\u00e9 & co"}"#).expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patches 0024-0025: `asdict` of nested dataclasses as a tool argument, `replace`, `fields`, and `OrderedDict`.
#[tokio::test]
async fn dataclasses_asdict_and_ordereddict_work_on_tool_data() {
    let source = r#"
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields, replace
@dataclass
class Line:
    sku: str
    qty: int
@dataclass
class Order:
    id: int
    lines: list
r = echo(order={'id': 7, 'lines': [{'sku': 'A', 'qty': 2}]})
o = Order(r['value']['order']['id'], [Line(**l) for l in r['value']['order']['lines']])
sent = echo(order=asdict(replace(o, id=8)))['value']
cache = OrderedDict()
for k in ['a', 'b', 'c']:
    cache[k] = len(cache)
cache.move_to_end('a')
oldest = cache.popitem(last=False)
{'sent': sent, 'fields': [f.name for f in fields(Line)], 'cache': list(cache.items()), 'oldest': oldest, 'repr': repr(cache)}
"#;
    let cpython: serde_json::Value = serde_json::from_str(r#"{"cache": [["c", 2], ["a", 0]], "fields": ["sku", "qty"], "oldest": ["b", 1], "repr": "OrderedDict([('c', 2), ('a', 0)])", "sent": {"order": {"id": 8, "lines": [{"qty": 2, "sku": "A"}]}}}"#).expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patch 0031: `@property` with a setter, `@classmethod`, `@staticmethod`.
#[tokio::test]
async fn method_decorators_work_on_tool_data() {
    let source = r#"
class Invoice:
    rate = 0.2
    def __init__(self, net):
        self._net = net
    @property
    def total(self):
        return round(self._net * (1 + self.rate), 2)
    @total.setter
    def total(self, value):
        self._net = round(value / (1 + self.rate), 2)
    @classmethod
    def from_row(cls, row):
        return cls(row['net'])
    @staticmethod
    def parse(text):
        return float(text.strip('$'))
r = echo(rows=[{'net': 100}, {'net': 50}])
invoices = [Invoice.from_row(row) for row in r['value']['rows']]
inv = invoices[0]
inv.total = 240
{'totals': [i.total for i in invoices], 'net': inv._net, 'parsed': Invoice.parse('$12.5'), 'again': inv.total}
"#;
    let cpython: serde_json::Value =
        serde_json::from_str(r#"{"again": 240.0, "net": 200.0, "parsed": 12.5, "totals": [240.0, 60.0]}"#)
            .expect("CPython's result is JSON");
    assert_eq!(result_of(source).await, cpython);
}

/// Patch 0032: a sort whose comparisons are no total order — a `NaN` parsed
/// from tool data, a `__lt__` that contradicts itself — keeps every item and
/// the run goes on (before, the guest crashed: the standard library's sort
/// panics on such a comparator).
#[tokio::test]
async fn a_sort_over_nan_scores_or_a_contradicting_lt_keeps_every_item() {
    let source = r#"
import random
r = echo(rows=[{'id': i, 'score': 'nan' if i % 3 == 0 else str(i * 7 % 10)} for i in range(60)])
rows = r['value']['rows']
by_score = sorted(rows, key=lambda row: float(row['score']), reverse=True)
scores = [float(row['score']) for row in rows]
scores.sort()
class Flaky:
    def __init__(self, n):
        self.n = n
    def __lt__(self, other):
        return random.random() < 0.5
flaky = sorted(Flaky(i) for i in range(200))
{'ids': sorted(row['id'] for row in by_score), 'nans': sum(1 for s in scores if s != s),
 'numbers': [s for s in scores if s == s][:5], 'flaky': sorted(f.n for f in flaky) == list(range(200))}
"#;
    let result = result_of(source).await;
    assert_eq!(result["ids"], serde_json::json!((0..60).collect::<Vec<_>>()));
    assert_eq!(result["nans"], 20);
    assert_eq!(result["flaky"], true);
    // The numbers between the NaNs are not in one sorted run (as in CPython), but none is lost.
    assert_eq!(result["numbers"].as_array().map(Vec::len), Some(5));
}

/// Patches 0035-0037: `uuid` (ids from the sandbox's entropy, `uuid5`),
/// `string.Template` over a tool's data, and `contextlib`'s `suppress` and
/// `nullcontext`.
#[tokio::test]
async fn uuid_template_and_contextlib_work_on_tool_data() {
    let source = r#"
import contextlib
import uuid
from string import Template
ids = [uuid.uuid4() for _ in range(3)]
r = echo(name='Ada', amount='12.50')
letter = Template('Dear $name, you owe $$${amount}.').substitute(r['value'])
with contextlib.suppress(KeyError, IndexError):
    {}['missing']
passed = 'no'
try:
    with contextlib.suppress(KeyError):
        int('x')
except ValueError:
    passed = 'ValueError went through'
with contextlib.nullcontext(r['value']['name']) as name:
    pass
try:
    Template('$who').substitute({})
    missing = None
except KeyError as e:
    missing = str(e)
{'versions': [u.version for u in ids], 'unique': len({str(u) for u in ids}), 'shape': [len(str(u)) for u in ids],
 'u5': str(uuid.uuid5(uuid.NAMESPACE_DNS, 'example.com')), 'letter': letter,
 'safe': Template('$a $b').safe_substitute(a=1), 'passed': passed, 'name': name, 'missing': missing}
"#;
    assert_eq!(
        result_of(source).await,
        serde_json::json!({
            "versions": [4, 4, 4], "unique": 3, "shape": [36, 36, 36],
            "u5": "cfbff0d1-9375-5685-968c-48ce8b15ae17", "letter": "Dear Ada, you owe $12.50.",
            "safe": "1 $b", "passed": "ValueError went through", "name": "Ada", "missing": "'who'"
        })
    );
}
