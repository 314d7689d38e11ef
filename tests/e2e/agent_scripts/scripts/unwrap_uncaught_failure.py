# An unguarded unwrap() on a failing call ends the script with its RuntimeError.
first = unwrap(get_contract(customer_id="c2"))
print("first ok:", first["customer"])
second = unwrap(get_contract(customer_id="c8"))
print("never printed")
second
