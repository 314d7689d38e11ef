# itertools: groupby over sorted orders, chain, islice, accumulate.
from itertools import accumulate, chain, groupby, islice

orders = unwrap(list_orders(page_size=100))["orders"]
orders.sort(key=lambda o: o["customer_id"])
per_customer = {cid: [o["total"] for o in group] for cid, group in groupby(orders, key=lambda o: o["customer_id"])}
running = [round(x, 2) for x in accumulate(per_customer["c1"])]
first_five = list(islice(chain(per_customer["c3"], per_customer["c4"]), 5))
pairs = [(cid, len(totals)) for cid, totals in per_customer.items()]
{"running_c1": running, "first_five": first_five, "pairs": pairs}
