# any(), all(), sum(), min() and max() over generator expressions of tool results.
invoices = unwrap(list_invoices(customer_id="c2"))
orders = unwrap(list_orders(customer_id="c2", page_size=50))["orders"]
summary = {
    "any_unpaid": any(not i["paid"] for i in invoices),
    "all_usd": all(i["currency"] == "USD" for i in invoices),
    "billed": round(sum(i["amount"] for i in invoices), 2),
    "largest": max((i["amount"], i["id"]) for i in invoices),
    "earliest_order": min(o["placed"] for o in orders),
    "cancelled": sum(o["status"] == "cancelled" for o in orders),
}
print(", ".join(f"{k}={v}" for k, v in summary.items()))
summary
