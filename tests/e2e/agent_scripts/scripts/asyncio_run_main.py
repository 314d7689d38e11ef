# async def main() run by asyncio.run, with gathers nested in gathers.
import asyncio


async def profile(customer_id):
    customer, contract = await asyncio.gather(
        call_async("get_customer", customer_id=customer_id),
        call_async("get_contract", customer_id=customer_id),
    )
    return {
        "name": unwrap(customer)["name"],
        "ends": contract["value"]["end_date"] if contract["ok"] else None,
    }


async def main():
    ids = [c["id"] for c in unwrap(await call_async("list_customers", region="emea"))]
    profiles = await asyncio.gather(*[profile(cid) for cid in ids])
    return dict(zip(ids, profiles))


result = asyncio.run(main())
print(len(result), "profiles")
result
