# The same chain with the look-ups made together: one batch.
import asyncio

issues = unwrap(list_issues(opened_after=input["week_start"]))
customer_ids = sorted({issue["customer_id"] for issue in issues})
results = await asyncio.gather(*[call_async("get_contract", customer_id=c) for c in customer_ids])
contracts = {c: r["value"] for c, r in zip(customer_ids, results) if r["ok"]}
missing = [c for c, r in zip(customer_ids, results) if not r["ok"]]
ending_soon = sorted(
    (terms["customer"], terms["end_date"]) for terms in contracts.values() if terms["end_date"] <= "2026-12-31"
)
print(f"looked up {len(customer_ids)} customers, {len(missing)} without a contract")
{"ending_soon": ending_soon, "missing": missing}
