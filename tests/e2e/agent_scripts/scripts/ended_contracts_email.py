# For each issue opened last week, look up the customer's contract and email
# the owner when the contract has ended.
issues = unwrap(list_issues(opened_after=input["week_start"]))
emailed, skipped = [], []
for issue in issues:
    contract = get_contract(customer_id=issue["customer_id"])
    if not contract["ok"]:
        print(f"{issue['id']}: no contract ({contract['error']['code']})")
        skipped.append(issue["id"])
        continue
    terms = contract["value"]
    if terms["end_date"] < input["today"]:
        sent = send_email(
            to=terms["owner_email"],
            subject=f"{issue['id']}: {terms['customer']}'s contract ended {terms['end_date']}",
            body=f"Issue {issue['id']} ({issue['title']}) came from a customer whose contract has ended.",
        )
        if sent["ok"]:
            emailed.append(issue["id"])
{"checked": len(issues), "emailed": emailed, "skipped": skipped}
