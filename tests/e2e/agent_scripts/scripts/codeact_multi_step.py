# CodeAct-style: inspect data, print intermediate observations, act on what was found.
issues = unwrap(list_issues(opened_after="2026-11-16", status="in_progress"))
print("in progress:", [i["id"] for i in issues])
stale = [i for i in issues if i["opened"] < "2026-11-22"]
print("stale:", len(stale))
updates = []
for issue in stale:
    detail = unwrap(get_issue(issue_id=issue["id"]))
    owner = detail["assignee"] or "ines@example.com"
    updated = update_issue(issue_id=issue["id"], status="open", assignee=owner, note="stale: re-triage")
    updates.append((issue["id"], updated["ok"], updated["value"]["assignee"] if updated["ok"] else None))
bad = update_issue(issue_id="ISS-100", status="reopened")
print("bad status ->", bad["error"]["code"])
updates
