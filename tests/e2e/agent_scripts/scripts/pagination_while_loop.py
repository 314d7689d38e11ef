# Page through all orders with a while loop and total them per status.
totals = {}
page, pages = 1, 0
while True:
    result = unwrap(list_orders(page=page, page_size=10))
    pages += 1
    for order in result["orders"]:
        totals[order["status"]] = round(totals.get(order["status"], 0) + order["total"], 2)
    if result["next_page"] is None:
        break
    page = result["next_page"]
print(f"{pages} pages")
dict(sorted(totals.items()))
