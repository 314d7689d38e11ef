# Build a markdown digest of last week's open issues and email it to the lead.
issues = unwrap(list_issues(opened_after=input["week_start"], status="open"))
names = {}
lines = ["| issue | customer | priority | labels |", "|---|---|---|---|"]
for issue in sorted(issues, key=lambda i: (i["priority"], i["id"])):
    cid = issue["customer_id"]
    if cid not in names:
        names[cid] = unwrap(get_customer(customer_id=cid))["name"]
    lines.append(f"| {issue['id']} | {names[cid]} | {issue['priority'].upper()} | {', '.join(issue['labels'])} |")
body = "\n".join(lines)
sent = unwrap(send_email(to=input["report_to"], subject=f"Open issues since {input['week_start']} ({len(issues)})", body=body))
print(body)
{"rows": len(issues), "customers": len(names), "message_id": sent["message_id"]}
