# Find unpaid invoices that are more than 30 days overdue and group them by customer.
from datetime import date, timedelta

today = date.fromisoformat(input["today"])
cutoff = today - timedelta(days=30)
unpaid = unwrap(list_invoices(paid=False))
overdue = {}
for invoice in unpaid:
    due = date.fromisoformat(invoice["due"])
    if due < cutoff:
        days = (today - due).days
        overdue.setdefault(invoice["customer_id"], []).append((invoice["id"], days))
report = []
for customer_id in sorted(overdue):
    name = unwrap(get_customer(customer_id=customer_id))["name"]
    worst = max(overdue[customer_id], key=lambda pair: pair[1])
    report.append(f"{name}: {len(overdue[customer_id])} overdue, worst {worst[0]} ({worst[1]} days)")
print("\n".join(report))
{"cutoff": cutoff.isoformat(), "customers": len(overdue), "invoices": sum(len(v) for v in overdue.values())}
