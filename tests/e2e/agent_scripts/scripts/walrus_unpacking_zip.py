# Walrus, star unpacking, zip, enumerate and dict/set comprehensions.
employees = unwrap(list_employees())
first, *middle, last = sorted(e["name"] for e in employees)
managers = {e["id"]: e["manager_id"] for e in employees}
with_reports = {m for m in managers.values() if m}
big_teams = [(team, n) for team in sorted({e["team"] for e in employees}) if (n := sum(e["team"] == team for e in employees)) >= 2]
pairs = list(zip([e["id"] for e in employees], [e["email"].split("@")[0] for e in employees]))
numbered = [f"{i}:{name}" for i, (_, name) in enumerate(pairs, 1)]
if (count := len(with_reports)) > 2:
    print(f"{count} people have reports")
{"first": first, "last": last, "middle": len(middle), "big_teams": big_teams, "numbered": numbered[:3]}
