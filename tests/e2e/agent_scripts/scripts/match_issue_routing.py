# Route issues with structural pattern matching.
def route(issue):
    match issue:
        case {"priority": "p1", "labels": [*_, "outage"]}:
            return "page-oncall"
        case {"labels": ["auth", *rest]} if "sso" in rest:
            return "identity-team"
        case {"labels": ["billing"]} | {"labels": ["audit"]}:
            return "finance-ops"
        case {"status": "closed"}:
            return "ignore"
        case _:
            return "support-queue"


routes = {}
for issue in unwrap(list_issues(opened_after="2026-11-20")):
    routes.setdefault(route(issue), []).append(issue["id"])
for target, ids in sorted(routes.items()):
    print(f"{target}: {len(ids)}")
routes
