# try / except / else / finally around refunds, with counters.
attempted = refunded = 0
outcomes = []
for order_id, amount in [("B-1001", 5.0), ("A-1004", 1.0), ("B-1005", 1000.0), ("X-1", 1.0)]:
    try:
        attempted += 1
        r = unwrap(refund_order(order_id=order_id, reason="late delivery", amount=amount))
    except RuntimeError as error:
        outcomes.append((order_id, str(error).split(": ")[1]))
    else:
        refunded += 1
        outcomes.append((order_id, r["refund_id"]))
    finally:
        outcomes.append(f"done {order_id}")
{"attempted": attempted, "refunded": refunded, "outcomes": outcomes}
