# A paging generator handed to enumerate(), zip(), str.join() and `in`, left early.
def all_orders(customer_id=None):
    page = 1
    while page is not None:
        batch = unwrap(list_orders(customer_id=customer_id, page=page, page_size=3))
        yield from batch["orders"]
        page = batch["next_page"]


lines = []
for n, order in enumerate(all_orders(), start=1):
    lines.append(f"{n}. {order['order_id']} {order['status']}")
    if n == 4:
        break
labels = ["first", "second"]
paired = {label: order["order_id"] for label, order in zip(labels, all_orders(customer_id="c2"))}
ids = ", ".join(o["order_id"] for o in all_orders(customer_id="c1"))
has_cancelled = "cancelled" in (o["status"] for o in all_orders())
print("\n".join(lines))
{"paired": paired, "c1": ids, "has_cancelled": has_cancelled}
