# Build dashboard links with urllib.parse for each alerting service.
from urllib.parse import quote, urlencode, urlparse

links = []
for service in ["api", "export"]:
    m = unwrap(fetch_metrics(service=service))
    query = urlencode({"service": service, "window": m["window"], "note": f"p99 {m['p99_ms']} ms"})
    links.append(f"https://dash.example.com/view?{query}")
parsed = urlparse(links[0])
{"links": links, "host": parsed.netloc, "path": quote("/reports/Q4 summary")}
