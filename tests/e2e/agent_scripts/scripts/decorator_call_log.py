# A decorator that logs and counts tool calls made through the helpers it wraps.
calls_made = 0


def logged(fn):
    def wrapper(*args, **kwargs):
        global calls_made
        calls_made += 1
        result = fn(*args, **kwargs)
        print(f"[{calls_made}] {fn.__name__}{args} -> {'ok' if result is not None else 'none'}")
        return result

    return wrapper


@logged
def weather_for(city):
    result = get_weather(city=city, date="2026-12-01")
    return result["value"] if result["ok"] else None


def make_counter():
    seen = 0

    def bump():
        nonlocal seen
        seen += 1
        return seen

    return bump


bump = make_counter()
cities = {}
for employee in unwrap(list_employees()):
    city = employee["timezone"].split("/")[-1]
    if city not in cities and city != "UTC":
        bump()
        cities[city] = weather_for(city)
{"calls": calls_made, "counted": bump() - 1, "conditions": {c: w["condition"] for c, w in cities.items() if w}}
