# A custom exception class to stop on a missing record, caught by its base class.
class LookupFailed(Exception):
    def __init__(self, what, code):
        super().__init__(f"{what}: {code}")
        self.code = code


def contract_for(customer_id):
    result = get_contract(customer_id=customer_id)
    if not result["ok"]:
        raise LookupFailed(customer_id, result["error"]["code"])
    return result["value"]


ends = {}
for cid in ["c1", "c8", "c2"]:
    try:
        ends[cid] = contract_for(cid)["end_date"]
    except Exception as error:
        print("skipping", error)
        ends[cid] = None
ends
