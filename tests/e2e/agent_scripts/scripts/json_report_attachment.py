# Summarise contracts as JSON and send it as the body of an email.
import json

summary = {}
for customer in unwrap(list_customers(region="amer")):
    result = get_contract(customer_id=customer["id"])
    if result["ok"]:
        c = result["value"]
        summary[customer["id"]] = {"customer": c["customer"], "ends": c["end_date"], "value": c["value"], "renews": c["auto_renew"]}
body = json.dumps(summary, indent=2, sort_keys=True)
sent = unwrap(send_email(to="finance@example.com", subject="AMER contracts", body=body))
roundtrip = json.loads(body)
print(json.dumps({"sent": sent["message_id"], "count": len(roundtrip)}))
{"keys": list(roundtrip), "compact": json.dumps(roundtrip["c2"], separators=(",", ":"))}
