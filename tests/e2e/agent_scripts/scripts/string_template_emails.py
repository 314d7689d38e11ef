# Renewal emails from a string.Template, with string constants for a code.
import string

template = string.Template("Hello $name,\n\nyour contract ends on $end. Reply to renew.\n")
sent = []
for cid in ["c3", "c5"]:
    contract = unwrap(get_contract(customer_id=cid))
    body = template.substitute(name=contract["customer"], end=contract["end_date"])
    code = "".join(ch for ch in contract["customer"].upper() if ch in string.ascii_uppercase)[:4]
    sent.append(unwrap(send_email(to=contract["owner_email"], subject=f"Renewal {code}", body=body))["message_id"])
sent
