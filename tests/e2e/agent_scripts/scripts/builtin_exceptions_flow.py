# Error handling with builtin exceptions: KeyError, ValueError, unwrap's RuntimeError.
results = {"ok": [], "failed": []}
for customer_id in ["c3", "c9", "c6"]:
    try:
        customer = unwrap(get_customer(customer_id=customer_id))
        signed = customer["signed"]
        year = int(signed.split("-")[0])
        if year > 2025:
            raise ValueError(f"signed in the future: {signed}")
        results["ok"].append((customer["name"], year, customer["mrr"] * 12))
    except RuntimeError as error:
        results["failed"].append(str(error))
    except (KeyError, ValueError) as error:
        results["failed"].append(repr(error))
try:
    {}["missing"]
except KeyError as error:
    results["keyerror"] = str(error)
results
