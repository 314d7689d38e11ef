# Find the first 45-minute slot on 2026-12-01 when the whole support team is free.
import asyncio
from datetime import datetime, timedelta

DAY = "2026-12-01"
team = unwrap(list_employees(team="support"))
calendars = await asyncio.gather(*[call_async("get_calendar", email=e["email"], day=DAY) for e in team])


def at(hhmm):
    return datetime.fromisoformat(f"{DAY}T{hhmm}:00")


busy = sorted((at(slot["start"]), at(slot["end"])) for c in calendars for slot in unwrap(c)["busy"])
start, end_of_day, need = at("09:00"), at("17:00"), timedelta(minutes=45)
found = None
for b_start, b_end in busy:
    if b_start - start >= need:
        found = start
        break
    start = max(start, b_end)
if found is None and end_of_day - start >= need:
    found = start
invite = None
if found:
    attendees = [e["email"] for e in team]
    invite = unwrap(send_email(to=attendees[0], cc=attendees[1:], subject=f"Sync {found:%H:%M} UTC",
                               body=f"Meeting at {found.strftime('%Y-%m-%d %H:%M')} for {need.seconds // 60} minutes."))
{"slot": found.isoformat() if found else None, "invite": invite and invite["message_id"]}
