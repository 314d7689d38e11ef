# A generator that walks every page of orders, consumed lazily.
def all_orders(customer_id=None):
    page = 1
    while page is not None:
        batch = unwrap(list_orders(customer_id=customer_id, page=page, page_size=4))
        for order in batch["orders"]:
            yield order
        page = batch["next_page"]


first_processing = None
for order in all_orders():
    if order["status"] == "processing":
        first_processing = order["order_id"]
        break
delivered = sum(1 for o in all_orders(customer_id="c2") if o["status"] == "delivered")
{"first_processing": first_processing, "c2_delivered": delivered}
