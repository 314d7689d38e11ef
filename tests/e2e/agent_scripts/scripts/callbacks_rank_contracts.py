# Tool calls inside the functions that sorted(), max(), map() and filter() call back.
customers = [c["id"] for c in unwrap(list_customers())]


def contract_end(customer_id):
    try:
        return unwrap(get_contract(customer_id=customer_id))["end_date"]
    except RuntimeError:
        return "9999-12-31"


by_end = sorted(customers, key=contract_end)
biggest = max(customers[:4], key=lambda c: sum(i["amount"] for i in unwrap(list_invoices(customer_id=c))))
names = list(map(lambda c: unwrap(get_customer(customer_id=c))["name"], by_end[:3]))
with_contract = list(filter(lambda c: contract_end(c) != "9999-12-31", customers[:5]))
first_name = next(map(lambda c: unwrap(get_customer(customer_id=c))["name"], customers))
{"soonest": by_end[:3], "biggest": biggest, "names": names, "with_contract": with_contract, "first": first_name}
