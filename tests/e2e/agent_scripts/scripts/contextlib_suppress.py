# contextlib.suppress around look-ups that may raise.
from contextlib import suppress

names = {}
for cid in ["c1", "c8", "c99"]:
    with suppress(RuntimeError, KeyError):
        names[cid] = unwrap(get_contract(customer_id=cid))["customer"]
names
