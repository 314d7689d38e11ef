//! Language features real scripts use (issue 25, item 2) that third_party/monty's
//! patches add: generators, class inheritance with `super()`, and asyncio's
//! tasks. Each test runs an agent-style script whose tool calls go through
//! the real sidecar and the Python guest, and checks the values CPython 3.11
//! gives for the same script (echo's result is `{'value': kwargs}`).

use crate::support::*;
use tether_backend::pb;

/// Runs `source` over the demo and test tools; the run must succeed. Also
/// gives the names of the calls the backend received, in order.
async fn run_ok(source: &str) -> (serde_json::Value, Vec<String>) {
    let (_sidecar, client) = sidecar().await;
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    (outcome.result.expect("a finished run has a result"), recorder.names())
}

/// Patch 0038: a generator that pages through a tool is consumed lazily —
/// `for` with an early return, `next()`, `sum()` — and its run pauses on
/// each call inside the generator's frame; `send()` and `yield from` work.
#[tokio::test]
async fn a_generator_pages_through_a_tool_lazily() {
    let source = r#"
def pages(ids, size):
    start = 0
    while start < len(ids):
        end = start + size
        r = echo(items=ids[start:end], more=end < len(ids))
        for item in r['value']['items']:
            yield item
        if not r['value']['more']:
            return
        start = end

def first(gen, wanted):
    for x in gen:
        if wanted(x):
            return x

g = pages(list(range(10)), 3)
a, b = next(g), next(g)
first_big = first(pages(list(range(10)), 3), lambda i: i > 4)
total = sum(pages(list(range(10)), 4))

def doubler():
    n = yield 'ready'
    while True:
        n = yield n * 2

d = doubler()
sent = [next(d), d.send(5), d.send(7)]

def outer():
    yield from pages([1, 2], 5)
    yield 'done'

{'a': a, 'b': b, 'first_big': first_big, 'total': total, 'sent': sent, 'outer': list(outer()),
 'type': type(g).__name__, 'exhausted': next(pages([], 1), 'none')}
"#;
    let (result, calls) = run_ok(source).await;
    assert_eq!(
        result,
        serde_json::json!({
            "a": 0, "b": 1, "first_big": 5, "total": 45, "sent": ["ready", 10, 14],
            "outer": [1, 2, "done"], "type": "generator", "exhausted": "none"
        })
    );
    // Lazy: `a, b` took one page, `first_big` two of four, `sum` three, `outer` one.
    assert_eq!(calls, vec!["echo"; 7], "{calls:?}");
}

/// Patch 0034: subclasses that override a method and reach the base's through
/// `super()`, class attributes found through the chain, `isinstance`,
/// `issubclass` and the MRO.
#[tokio::test]
async fn subclasses_override_and_call_super_while_calling_tools() {
    let source = r#"
class Notifier:
    channel = 'base'
    def __init__(self, owner):
        self.owner = owner
        self.sent = []
    def format(self, text):
        return f'[{self.channel}] {text}'
    def send(self, text):
        r = echo(to=self.owner, body=self.format(text))
        self.sent.append(r['value']['body'])
        return self

class EmailNotifier(Notifier):
    channel = 'email'

class UrgentEmail(EmailNotifier):
    def __init__(self, owner, level):
        super().__init__(owner)
        self.level = level
    def format(self, text):
        return super().format(text.upper()) + '!' * self.level

notifiers = [Notifier('a'), EmailNotifier('b'), UrgentEmail('c', 2)]
for n in notifiers:
    n.send('renew')
{'sent': [n.sent[0] for n in notifiers], 'email': [isinstance(n, EmailNotifier) for n in notifiers],
 'sub': issubclass(UrgentEmail, Notifier), 'mro': [c.__name__ for c in UrgentEmail.__mro__],
 'owners': [n.owner for n in notifiers]}
"#;
    let (result, calls) = run_ok(source).await;
    assert_eq!(
        result,
        serde_json::json!({
            "sent": ["[base] renew", "[email] renew", "[email] RENEW!!"], "email": [false, true, true],
            "sub": true, "mro": ["UrgentEmail", "EmailNotifier", "Notifier", "object"], "owners": ["a", "b", "c"]
        })
    );
    assert_eq!(calls.len(), 3);
}

/// Patch 0033: `create_task` puts the calls out together, a task is awaited
/// later (twice), `gather(return_exceptions=True)` keeps the others when one
/// call fails, and `wait_for` gives the awaitable's result.
#[tokio::test]
async fn tasks_gather_with_exceptions_and_wait_for_run_tool_calls() {
    let source = r#"
import asyncio

async def contract(cid):
    return unwrap(await call_async('get_contract', customer_id=cid))

async def main():
    tasks = [asyncio.create_task(contract(c)) for c in ['c1', 'c2']]
    owners = [(await t)['owner_email'] for t in tasks]
    again = (await tasks[0])['customer']
    results = await asyncio.gather(contract('c3'), contract('c8'), return_exceptions=True)
    kinds = [type(r).__name__ for r in results]
    waited = await asyncio.wait_for(contract('c4'), timeout=30)
    return {'owners': owners, 'again': again, 'kinds': kinds, 'first': results[0]['customer'],
            'failed': 'c8' in str(results[1]), 'waited': waited['customer'],
            'done': [t.done() for t in tasks], 'alias': asyncio.TimeoutError is TimeoutError}

asyncio.run(main())
"#;
    let (result, calls) = run_ok(source).await;
    assert_eq!(
        result,
        serde_json::json!({
            "owners": ["dana@example.com", "li@example.com"], "again": "Acme Corp",
            "kinds": ["dict", "RuntimeError"], "first": "Initech", "failed": true, "waited": "Umbrella",
            "done": [true, true], "alias": true
        })
    );
    // Awaiting a finished task twice makes no second call.
    assert_eq!(calls, vec!["get_contract"; 5], "{calls:?}");
}

/// Patch 0044: `wait_for` enforces its timeout where the script waits on its
/// own (a sleep): the awaited work is cancelled and makes no call after it.
/// A tool call already out is answered, and its answer delivered, however
/// long it takes: the turn checks, approves, runs and audits it, and the
/// answer is not thrown away. Here `hold` is released well after its
/// `wait_for`'s timeout.
#[tokio::test]
async fn wait_for_times_out_a_sleep_and_delivers_a_call_that_was_answered() {
    let source = r#"
import asyncio

async def slow():
    await asyncio.sleep(5)
    echo(after='the sleep')
    return 'slow'

async def held():
    return (await call_async('hold'))['value']

async def main():
    try:
        await asyncio.wait_for(slow(), timeout=0.05)
        timed_out = 'no'
    except asyncio.TimeoutError as e:
        timed_out = type(e).__name__ + repr(str(e))
    fast = await asyncio.wait_for(asyncio.sleep(0.01, result='fast'), timeout=5)
    answered = await asyncio.wait_for(held(), timeout=0.05)
    after = await asyncio.wait_for(call_async('echo', n=1), timeout=30)
    return {'timed_out': timed_out, 'fast': fast, 'answered': answered, 'after': after['value']}

asyncio.run(main())
"#;
    let (_sidecar, client) = sidecar().await;
    let (run, recorder) = spawn_held(&client, demo_request(source)).await;
    // The script is in `hold`, whose timer started before the call went out:
    // after this, the timer is due whenever the answer comes.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    recorder.release();
    let outcome = run.await.expect("the run's task").expect("the run completes");
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    assert_eq!(
        outcome.result.expect("a finished run has a result"),
        serde_json::json!({"timed_out": "TimeoutError''", "fast": "fast", "answered": "released", "after": {"n": 1}})
    );
    // The cancelled coroutine made no call after its sleep.
    assert_eq!(recorder.names(), vec!["hold", "echo"]);
}

/// Patches 0042 and 0043: a function or generator that calls a tool, handed
/// to `sorted(key=)`, `min`/`max(key=)`, `map`, `filter`, `enumerate`, `zip`,
/// `str.join` or `in`, pauses at each call as a `for` does, and the calls go
/// out in CPython's order, no more of them: an `enumerate` loop left by
/// `break`, `zip` stopping at its shorter side, `in` stopping at the match,
/// `next(map(...))` making one call.
#[tokio::test]
async fn builtins_that_call_back_pause_at_each_tool_call_in_cpython_order() {
    let source = r#"
def pages(n):
    for i in range(n):
        r = echo(page=i)
        yield r['value']['page']

def score(x):
    return echo(score=-x)['value']['score']

ranked = sorted([3, 1, 2], key=score)
newest = sorted(['b', 'a', 'c'], key=lambda s: echo(k=s)['value']['k'], reverse=True)
best = max([3, 1, 2], key=lambda x: echo(v=x % 3)['value']['v'])
least = min([4, 5], key=score, default=None)
doubled = list(map(lambda x: echo(x=x * 2)['value']['x'], [1, 2]))
kept = list(filter(lambda x: echo(keep=x > 1)['value']['keep'], [1, 2, 3]))
seen = []
for i, p in enumerate(pages(10)):
    seen.append([i, p])
    if i == 2:
        break
pairs = list(zip(pages(5), 'ab'))
joined = '-'.join(str(p) for p in pages(3))
found = 1 in pages(5)
first = next(map(score, [5, 6, 7]))
{'ranked': ranked, 'newest': newest, 'best': best, 'least': least, 'doubled': doubled, 'kept': kept,
 'seen': seen, 'pairs': pairs, 'joined': joined, 'found': found, 'first': first}
"#;
    let (_sidecar, client) = sidecar().await;
    let (outcome, recorder) = run_demo(&client, source).await;
    assert_eq!(outcome.status, pb::RunStatus::Ok, "{outcome:?}");
    assert_eq!(
        outcome.result.expect("a finished run has a result"),
        serde_json::json!({
            "ranked": [3, 2, 1], "newest": ["c", "b", "a"], "best": 2, "least": 5, "doubled": [2, 4],
            "kept": [2, 3], "seen": [[0, 0], [1, 1], [2, 2]], "pairs": [[0, "a"], [1, "b"]], "joined": "0-1-2",
            "found": true, "first": -5
        })
    );
    // CPython 3.11's calls for the same script, in order.
    let expected = serde_json::json!([
        {"score": -3}, {"score": -1}, {"score": -2}, {"k": "b"}, {"k": "a"}, {"k": "c"}, {"v": 0}, {"v": 1},
        {"v": 2}, {"score": -4}, {"score": -5}, {"x": 2}, {"x": 4}, {"keep": false}, {"keep": true},
        {"keep": true}, {"page": 0}, {"page": 1}, {"page": 2}, {"page": 0}, {"page": 1}, {"page": 2},
        {"page": 0}, {"page": 1}, {"page": 2}, {"page": 0}, {"page": 1}, {"score": -5}
    ]);
    let calls: Vec<serde_json::Value> = recorder.calls.lock().unwrap().iter().map(|call| call.args.clone()).collect();
    assert_eq!(serde_json::Value::Array(calls), expected);
}
