# Retry a flaky metrics call with a fallback window, then alert on the error rate.
def metrics(service):
    attempts = []
    for window in ["1h", "24h"]:
        result = fetch_metrics(service=service, window=window)
        attempts.append(f"{window}:{'ok' if result['ok'] else result['error']['code']}")
        if result["ok"]:
            return result["value"], attempts
    return None, attempts


alerts = []
log = {}
for service in ["api", "search", "billing"]:
    data, attempts = metrics(service)
    log[service] = attempts
    if data is None:
        continue
    rate = data["errors"] / data["requests"]
    if rate > 0.001:
        alerts.append(f"{service} {data['window']}: {rate:.3%} errors, p99 {data['p99_ms']} ms")
for line in alerts:
    unwrap(create_ticket(title=line, priority="p2", tags=["alert", "metrics"]))
{"attempts": log, "alerts": alerts}
