# Total each region's contract value in USD, converting with the currency tool.
totals = {}
for customer in unwrap(list_customers()):
    result = get_contract(customer_id=customer["id"])
    if not result["ok"]:
        continue
    contract = result["value"]
    if contract["currency"] == "USD":
        usd = contract["value"]
    else:
        usd = unwrap(convert_currency(amount=contract["value"], from_currency=contract["currency"], to_currency="USD"))["amount"]
    totals[customer["region"]] = totals.get(customer["region"], 0) + usd
for region, amount in sorted(totals.items()):
    print(f"{region.upper():5} ${amount:>12,.2f}")
{region: round(amount, 2) for region, amount in totals.items()}
