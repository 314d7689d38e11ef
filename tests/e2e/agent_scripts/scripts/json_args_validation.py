# A set is not a JSON argument: the call is refused before it is sent; a list is.
tags = {"billing", "urgent"}
try:
    create_ticket(title="Invoice total wrong", priority="p1", tags=tags)
    outcome = "sent"
except TypeError as error:
    outcome = "refused"
ticket = unwrap(create_ticket(title="Invoice total wrong", priority="p1", tags=sorted(tags)))
bad = create_ticket(title="x", priority="urgent")
{"first": outcome, "ticket": ticket["tags"], "bad": bad["error"]["code"]}
