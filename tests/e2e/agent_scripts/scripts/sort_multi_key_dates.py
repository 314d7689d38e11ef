# Multi-key sorts, min/max with keys, and dates compared as ISO strings.
issues = unwrap(list_issues(opened_after="2026-11-16"))
prio = {"p1": 0, "p2": 1, "p3": 2}
ordered = sorted(issues, key=lambda i: (prio[i["priority"]], i["opened"], i["id"]))
newest = max(issues, key=lambda i: (i["opened"], i["id"]))
oldest_open = min((i for i in issues if i["status"] == "open"), key=lambda i: i["opened"])
desc = sorted({i["opened"] for i in issues}, reverse=True)[:3]
{"first": [i["id"] for i in ordered[:4]], "newest": newest["id"], "oldest_open": oldest_open["id"], "days": desc}
