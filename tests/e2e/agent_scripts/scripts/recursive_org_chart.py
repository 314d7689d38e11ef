# Build an org chart from manager ids with a recursive function.
employees = unwrap(list_employees())
reports = {}
for e in employees:
    reports.setdefault(e["manager_id"], []).append(e)


def chart(manager_id, depth=0):
    lines = []
    for e in sorted(reports.get(manager_id, []), key=lambda x: x["name"]):
        lines.append("  " * depth + f"- {e['name']} ({e['team']})")
        lines.extend(chart(e["id"], depth + 1))
    return lines


def headcount(employee_id):
    return 1 + sum(headcount(r["id"]) for r in reports.get(employee_id, []))


text = "\n".join(chart(None))
print(text)
{"lines": len(text.splitlines()), "under_mara": headcount("e1") - 1, "under_ines": headcount("e2") - 1}
