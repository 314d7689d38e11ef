# The same chain as contracts.py, with the contract look-ups made together:
# asyncio.gather sends them to the backend as ONE batch it may run concurrently.
import asyncio

issues = unwrap(list_issues(opened_after=input["week_start"]))
customers = sorted({issue["customer_id"] for issue in issues})
looked_up = await asyncio.gather(*[call_async("get_contract", customer_id=c) for c in customers])
contracts = {c: r["value"] for c, r in zip(customers, looked_up) if r["ok"]}

emailed = []
for issue in issues:
    terms = contracts.get(issue["customer_id"])
    if terms is not None and terms["end_date"] < input["today"]:
        sent = send_email(
            to=terms["owner_email"],
            subject=f"{issue['id']}: {terms['customer']}'s contract ended {terms['end_date']}",
            body=f"Issue {issue['id']} ({issue['title']}) was opened by a customer whose contract has ended.",
        )
        if sent["ok"]:
            emailed.append(issue["id"])

{"checked": len(issues), "emailed": emailed, "no_contract": sorted(i["id"] for i in issues if i["customer_id"] not in contracts)}
