# Gather many look-ups, some of which fail, and split successes from failures.
import asyncio

order_ids = ["B-1001", "A-1002", "Z-9999", "A-1004", "B-1005", "Q-0000"]
results = await asyncio.gather(*[call_async("get_order", order_id=o) for o in order_ids])
found = {o: r["value"]["status"] for o, r in zip(order_ids, results) if r["ok"]}
errors = {o: r["error"]["code"] for o, r in zip(order_ids, results) if not r["ok"]}
refunds = []
for order_id, status in found.items():
    if status in ("delivered", "cancelled"):
        r = refund_order(order_id=order_id, reason="goodwill", amount=5.0)
        refunds.append((order_id, r["ok"], r["value"]["amount"] if r["ok"] else r["error"]["code"]))
{"found": found, "errors": errors, "refunds": refunds}
