# Rank enterprise and growth customers by monthly revenue, with their owners.
customers = unwrap(list_customers())
ranked = []
for c in customers:
    if c["tier"] in ("enterprise", "growth"):
        details = unwrap(get_customer(customer_id=c["id"]))
        ranked.append({"name": details["name"], "mrr": details["mrr"], "owner": details["owner_email"] or "(none)"})
ranked.sort(key=lambda row: row["mrr"], reverse=True)
for position, row in enumerate(ranked[:3], start=1):
    print(f"{position}. {row['name']:<20} {row['mrr']:>8,} USD  owner {row['owner']}")
total = sum(row["mrr"] for row in ranked)
{"top3": [row["name"] for row in ranked[:3]], "total_mrr": total, "share_top3": round(sum(r["mrr"] for r in ranked[:3]) / total, 4)}
