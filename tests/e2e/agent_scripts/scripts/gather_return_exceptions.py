# gather(return_exceptions=True) over coroutines that may raise.
import asyncio


async def weather(city):
    return unwrap(await call_async("get_weather", city=city, date="2026-12-01"))


cities = ["Lisbon", "Atlantis", "Tokyo"]
results = await asyncio.gather(*[weather(c) for c in cities], return_exceptions=True)
report = {}
for city, result in zip(cities, results):
    if isinstance(result, Exception):
        report[city] = f"error: {result}"
    else:
        report[city] = f"{result['temp_c']} C, {result['condition']}"
report
