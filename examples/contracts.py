# For each issue opened last week, look up the customer's contract, and email
# the owner only on issues whose customer's contract has ended.
#
# Run it:  ./x run examples/contracts.py
# Every call below goes back to the turn that ran the script, where it is
# checked, approved and audited like a call the model made itself.

issues = unwrap(list_issues(opened_after=input["week_start"]))
emailed = []
no_contract = []

for issue in issues:
    contract = get_contract(customer_id=issue["customer_id"])
    if not contract["ok"]:
        # A failure is a value with a code and a message, never an exception.
        print(f"{issue['id']}: no contract ({contract['error']['code']})")
        no_contract.append(issue["id"])
        continue
    terms = contract["value"]
    if terms["end_date"] < input["today"]:
        sent = send_email(
            to=terms["owner_email"],
            subject=f"{issue['id']}: {terms['customer']}'s contract ended {terms['end_date']}",
            body=f"Issue {issue['id']} ({issue['title']}) was opened by a customer whose contract has ended.",
        )
        if sent["ok"]:
            emailed.append(issue["id"])
        else:
            print(f"{issue['id']}: email not sent: {sent['error']['message']}")

{"checked": len(issues), "emailed": emailed, "no_contract": no_contract}
