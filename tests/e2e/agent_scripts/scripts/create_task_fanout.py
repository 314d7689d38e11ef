# Fan out with asyncio.create_task and await the tasks one by one.
import asyncio


async def docs_for(term):
    return unwrap(await call_async("search_docs", query=term, limit=1))


async def main():
    tasks = [asyncio.create_task(docs_for(term)) for term in ["export", "invoice", "audit"]]
    found = []
    for task in tasks:
        hits = await task
        found.append(hits[0]["doc_id"] if hits else None)
    return found


asyncio.run(main())
