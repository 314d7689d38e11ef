# Wrap a long issue body for a ticket with textwrap.
import textwrap

issue = unwrap(get_issue(issue_id="ISS-101"))
wrapped = textwrap.fill(issue["body"], width=40)
summary = textwrap.shorten(issue["body"], width=50, placeholder=" ...")
ticket = unwrap(create_ticket(title=summary, priority="p2", tags=["export"]))
print(textwrap.indent(wrapped, "> "))
{"ticket": ticket["ticket_id"], "lines": len(wrapped.splitlines())}
