# AppWorld-style API names that are not identifiers, called through call().
contacts = call("crm.search_contacts", {"query": "acme"})
assert contacts["ok"], contacts
people = contacts["value"]
same_company = call("crm.search_contacts", query="o", company="Acme Corp")["value"]
unknown = call("crm.delete_everything", confirm=True)
messages = []
for person in people:
    r = call("send_email", to=person["email"], subject="Hello from support", body=f"Hi {person['name'].split()[0]}")
    messages.append(r["value"]["message_id"])
{"people": [p["name"] for p in people], "filtered": len(same_company), "unknown": unknown["error"]["code"], "messages": messages}
