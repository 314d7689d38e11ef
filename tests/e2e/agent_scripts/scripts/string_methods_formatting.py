# String methods and old and new formatting on tool data.
employees = unwrap(list_employees(team="engineering"))
lines = []
for e in employees:
    first, _, last = e["name"].partition(" ")
    handle = e["email"].split("@")[0].upper().zfill(6)
    lines.append("%-6s %s" % (first, last.lower().capitalize()))
    lines.append("{0}|{1:^10}|{2!r}".format(handle, e["team"].title(), e["timezone"].replace("/", " / ")))
text = "\n".join(lines)
print(text)
{"count": text.count("\n") + 1, "upper": [l.strip().startswith(("Y", "O")) for l in lines], "joined": "-".join(sorted(e["id"] for e in employees))}
