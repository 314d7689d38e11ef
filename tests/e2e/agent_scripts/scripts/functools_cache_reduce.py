# functools: a cached customer lookup (fewer tool calls), reduce and partial.
from functools import lru_cache, partial, reduce


@lru_cache(maxsize=None)
def customer_name(customer_id):
    return unwrap(get_customer(customer_id=customer_id))["name"]


issues = unwrap(list_issues(opened_after="2026-11-22"))
titled = [f"{customer_name(i['customer_id'])}: {i['title']}" for i in issues]
orders_of = partial(list_orders, page_size=50)
c1_orders = unwrap(orders_of(customer_id="c1"))["orders"]
total = reduce(lambda acc, o: acc + o["total"], c1_orders, 0.0)
longest = reduce(lambda a, b: a if len(a) >= len(b) else b, titled)
{"issues": len(titled), "longest": longest, "c1_total": round(total, 2), "cache": customer_name.cache_info().hits}
