# next() over a generator expression to find the first match.
customers = unwrap(list_customers(region="emea"))
first_enterprise = next((c for c in customers if c["tier"] == "enterprise"), None)
first_platinum = next((c for c in customers if c["tier"] == "platinum"), None)
details = unwrap(get_customer(customer_id=first_enterprise["id"]))
print(f"first enterprise customer in EMEA: {details['name']}")
{"enterprise": details["name"], "platinum": first_platinum}
