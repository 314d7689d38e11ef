# Calendar arithmetic: ISO weeks, weekdays, strftime and time zones (UTC).
from datetime import date, datetime, timedelta, timezone

issues = unwrap(list_issues(opened_after="2026-11-16"))
per_week = {}
for issue in issues:
    day = date.fromisoformat(issue["opened"])
    week = day.isocalendar()[1]
    per_week.setdefault(f"2026-W{week}", []).append(day.strftime("%a %d %b"))
start = datetime(2026, 11, 30, 9, 30, tzinfo=timezone.utc)
due = start + timedelta(days=3, hours=5)
{"weeks": {w: len(d) for w, d in sorted(per_week.items())}, "first": per_week[min(per_week)][0],
 "due": due.isoformat(), "weekday": due.strftime("%A"), "span": str(due - start)}
