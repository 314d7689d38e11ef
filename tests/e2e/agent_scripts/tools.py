"""The tools of the agent-style conformance set, and their data: defined once.

Both sides of the comparison call these very functions. The CPython side
imports this module (`cpython_run.py`); the sandbox side's calls reach it
through `python3 tools.py --serve`, a tool server the Rust test starts once
and talks to in JSON lines. Every tool is a pure function of its arguments
(no state, no clock, no randomness), so the order in which concurrent calls
arrive cannot change a result.

A tool fails by raising `ToolError(code, message)`; the caller turns that
into Tether's failure value `{"ok": False, "value": None, "error": {...}}`.
"""

import hashlib
import json
import sys

# The run's input value (`input` in a script).
INPUT = {"today": "2026-11-30", "week_start": "2026-11-23", "team": "support", "report_to": "lead@example.com"}


class ToolError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


# --- the data ---------------------------------------------------------------

CUSTOMERS = [
    {"id": "c1", "name": "Acme Corp", "tier": "enterprise", "region": "emea", "owner_email": "dana@example.com", "mrr": 12000, "signed": "2023-02-14"},
    {"id": "c2", "name": "Globex", "tier": "growth", "region": "amer", "owner_email": "li@example.com", "mrr": 4300, "signed": "2024-07-01"},
    {"id": "c3", "name": "Initech", "tier": "starter", "region": "amer", "owner_email": "sam@example.com", "mrr": 650, "signed": "2025-01-20"},
    {"id": "c4", "name": "Umbrella", "tier": "enterprise", "region": "apac", "owner_email": "ana@example.com", "mrr": 18500, "signed": "2022-11-03"},
    {"id": "c5", "name": "Hooli", "tier": "growth", "region": "amer", "owner_email": "raj@example.com", "mrr": 5100, "signed": "2024-03-18"},
    {"id": "c6", "name": "Vandelay", "tier": "starter", "region": "emea", "owner_email": "kim@example.com", "mrr": 480, "signed": "2025-09-09"},
    {"id": "c7", "name": "Stark Industries", "tier": "enterprise", "region": "amer", "owner_email": "ola@example.com", "mrr": 22750, "signed": "2021-05-30"},
    {"id": "c8", "name": "Wayne Enterprises", "tier": "growth", "region": "emea", "owner_email": "", "mrr": 3900, "signed": "2025-12-01"},
]

CONTRACTS = {
    "c1": {"start": "2024-07-01", "end": "2026-06-30", "value": 144000, "currency": "EUR", "auto_renew": False},
    "c2": {"start": "2025-04-01", "end": "2027-03-31", "value": 51600, "currency": "USD", "auto_renew": True},
    "c3": {"start": "2025-11-16", "end": "2026-11-15", "value": 7800, "currency": "USD", "auto_renew": False},
    "c4": {"start": "2025-01-01", "end": "2027-12-31", "value": 666000, "currency": "JPY", "auto_renew": True},
    "c5": {"start": "2025-11-30", "end": "2026-11-29", "value": 61200, "currency": "USD", "auto_renew": False},
    "c6": {"start": "2025-09-09", "end": "2028-01-31", "value": 14400, "currency": "GBP", "auto_renew": True},
    "c7": {"start": "2024-12-02", "end": "2026-12-01", "value": 546000, "currency": "USD", "auto_renew": False},
    # c8 has no contract on file.
}

_TITLES = ["Login fails", "Export is slow", "Invoice total wrong", "API returns 500", "Missing audit entries", "SSO loop"]
_LABELS = [["auth"], ["performance", "export"], ["billing"], ["api", "outage"], ["audit"], ["auth", "sso"]]
_STATUSES = ["open", "open", "in_progress", "closed"]
_PRIORITIES = ["p3", "p2", "p1", "p2", "p3"]

ISSUES = [
    {
        "id": f"ISS-{100 + n}",
        "title": _TITLES[n % 6],
        "customer_id": CUSTOMERS[(n * 3) % 8]["id"],
        "opened": f"2026-11-{16 + (n * 3) % 14:02d}",
        "status": _STATUSES[n % 4],
        "priority": _PRIORITIES[n % 5],
        "labels": _LABELS[n % 6],
        "assignee": [None, "ines@example.com", "tom@example.com"][n % 3],
    }
    for n in range(24)
]

_BODIES = [
    "Customer reports error E1042 when logging in via SSO. Order #A-1001 affected. Contact: ops@acme.example",
    "Exports of more than 10000 rows take 95 seconds; see order #B-2002 and order #B-2003.",
    "Invoice INV-2026-031 shows 1,250.00 EUR but should be 1,200.00 EUR (discount missing).",
    "GET /v2/orders returns HTTP 500 since 2026-11-20T14:05:00Z; trace id 7f3a9c.",
    "Audit log lacks entries between 2026-11-21 and 2026-11-22 for user u-77.",
    "SSO redirect loops for users of tenant t-19; error code E1099, see #A-1007.",
]

INVOICES = [
    {"id": f"INV-2026-{n:03d}", "customer_id": CUSTOMERS[n % 8]["id"], "amount": round(150.0 + (n * 137.5) % 2400, 2),
     "currency": ["USD", "EUR", "GBP", "USD", "JPY"][n % 5], "due": f"2026-{9 + n % 3:02d}-{1 + (n * 7) % 28:02d}",
     "paid": n % 3 == 0}
    for n in range(1, 31)
]

RATES_TO_USD = {"USD": 1.0, "EUR": 1.08, "GBP": 1.27, "JPY": 0.0067, "CHF": 1.13}

DOCS = [
    {"doc_id": "kb-1", "title": "Resetting SSO configuration", "updated": "2026-10-02",
     "body": "To reset SSO, open Settings > Security. Error E1042 means the IdP certificate expired. Error E1099 means a redirect loop; clear the tenant's callback URL."},
    {"doc_id": "kb-2", "title": "Exporting large datasets", "updated": "2026-08-15",
     "body": "Exports over 10000 rows run in the background. Use the async export API: POST /v2/exports. Typical time: 2 minutes per 100000 rows."},
    {"doc_id": "kb-3", "title": "Invoice corrections", "updated": "2026-11-01",
     "body": "Billing can issue a corrected invoice within 30 days. Discounts apply before tax. Contact billing@example.com with the invoice number."},
    {"doc_id": "kb-4", "title": "API error codes", "updated": "2026-09-12",
     "body": "HTTP 500 means an internal error; retry with backoff. HTTP 429 means rate limited: at most 100 requests per minute. Error E1042: certificate expired."},
    {"doc_id": "kb-5", "title": "Audit log retention", "updated": "2026-06-30",
     "body": "Audit entries are kept for 365 days. Gaps usually mean the ingest queue was paused; replay it from Settings > Audit."},
    {"doc_id": "kb-6", "title": "Renewing a contract", "updated": "2026-11-20",
     "body": "Contracts without auto renew end on their end date. The account owner should send a renewal quote 30 days before the end."},
]

EMPLOYEES = [
    {"id": "e1", "name": "Mara Quinn", "email": "mara@example.com", "team": "leadership", "manager_id": None, "timezone": "UTC"},
    {"id": "e2", "name": "Ines Costa", "email": "ines@example.com", "team": "support", "manager_id": "e1", "timezone": "Europe/Lisbon"},
    {"id": "e3", "name": "Tom Berg", "email": "tom@example.com", "team": "support", "manager_id": "e2", "timezone": "Europe/Oslo"},
    {"id": "e4", "name": "Yuki Sato", "email": "yuki@example.com", "team": "engineering", "manager_id": "e1", "timezone": "Asia/Tokyo"},
    {"id": "e5", "name": "Omar Haddad", "email": "omar@example.com", "team": "engineering", "manager_id": "e4", "timezone": "UTC"},
    {"id": "e6", "name": "Lena Fischer", "email": "lena@example.com", "team": "support", "manager_id": "e2", "timezone": "Europe/Berlin"},
    {"id": "e7", "name": "Dev Patel", "email": "dev@example.com", "team": "billing", "manager_id": "e1", "timezone": "Asia/Kolkata"},
]

# Busy slots per person on 2026-12-01 (UTC, "HH:MM" to "HH:MM").
CALENDARS = {
    "mara@example.com": [["09:00", "10:30"], ["13:00", "14:00"]],
    "ines@example.com": [["08:30", "09:30"], ["11:00", "12:00"], ["15:00", "16:30"]],
    "tom@example.com": [["10:00", "11:00"], ["14:00", "15:00"]],
    "yuki@example.com": [["09:00", "09:45"], ["12:30", "13:30"]],
    "omar@example.com": [],
    "lena@example.com": [["09:30", "10:15"], ["16:00", "17:00"]],
    "dev@example.com": [["08:00", "12:00"]],
}

ORDERS = [
    {"order_id": f"{'AB'[n % 2]}-{1000 + n}", "customer_id": CUSTOMERS[n % 7]["id"], "total": round(19.99 * (1 + n % 9), 2),
     "status": ["delivered", "shipped", "processing", "delivered", "cancelled"][n % 5], "placed": f"2026-11-{1 + n % 28:02d}",
     "items": [{"sku": f"SKU-{(n * 7 + k) % 50:02d}", "qty": 1 + (n + k) % 3} for k in range(1 + n % 3)]}
    for n in range(1, 26)
]

WEATHER = {
    ("Lisbon", "2026-12-01"): {"temp_c": 16.5, "condition": "sunny", "wind_kmh": 12},
    ("Oslo", "2026-12-01"): {"temp_c": -4.0, "condition": "snow", "wind_kmh": 20},
    ("Tokyo", "2026-12-01"): {"temp_c": 9.5, "condition": "cloudy", "wind_kmh": 8},
    ("Berlin", "2026-12-01"): {"temp_c": 2.0, "condition": "rain", "wind_kmh": 25},
    ("Kolkata", "2026-12-01"): {"temp_c": 27.0, "condition": "haze", "wind_kmh": 5},
}

METRICS = {
    ("api", "24h"): {"requests": 1843200, "errors": 2211, "p50_ms": 41, "p99_ms": 870},
    ("api", "1h"): {"requests": 80412, "errors": 391, "p50_ms": 44, "p99_ms": 1420},
    ("search", "24h"): {"requests": 402113, "errors": 95, "p50_ms": 120, "p99_ms": 990},
    ("export", "24h"): {"requests": 1207, "errors": 31, "p50_ms": 52000, "p99_ms": 95000},
    ("export", "1h"): {"requests": 48, "errors": 2, "p50_ms": 51000, "p99_ms": 94000},
}

WEB = [
    {"url": "https://status.example.com/incidents/2026-11-20", "title": "Elevated API errors on Nov 20",
     "text": "Between 14:05 and 15:40 UTC the orders API returned HTTP 500 for 7% of requests. Root cause: a failed database failover."},
    {"url": "https://blog.example.com/sso-certificates", "title": "Rotating SSO certificates",
     "text": "IdP certificates expire every 12 months. Rotate them 14 days early to avoid error E1042."},
    {"url": "https://en.example.org/wiki/Net_revenue_retention", "title": "Net revenue retention",
     "text": "Net revenue retention (NRR) is starting MRR plus expansion minus churn and contraction, divided by starting MRR."},
    {"url": "https://weather.example.net/lisbon", "title": "Lisbon weather",
     "text": "Lisbon stays mild in December with average highs of 15 C."},
]

CONTACTS = [
    {"contact_id": f"ct-{n}", "name": name, "email": email, "company": company}
    for n, (name, email, company) in enumerate(
        [("Pat Lee", "pat@acme.example", "Acme Corp"), ("Chris Ode", "chris@globex.example", "Globex"),
         ("Robin Fay", "robin@acme.example", "Acme Corp"), ("Sky Amari", "sky@hooli.example", "Hooli"),
         ("Jo Brandt", "jo@initech.example", "Initech")], start=1)
]


# --- the tools ----------------------------------------------------------------

def _customer(customer_id):
    for customer in CUSTOMERS:
        if customer["id"] == customer_id:
            return customer
    raise ToolError("not_found", f"no customer `{customer_id}`")


def _digest(*parts):
    return hashlib.sha256("|".join(str(part) for part in parts).encode()).hexdigest()[:8]


def list_issues(opened_after, status=None, customer_id=None):
    return [
        {key: issue[key] for key in ("id", "title", "customer_id", "opened", "status", "priority", "labels")}
        for issue in ISSUES
        if issue["opened"] >= opened_after
        and (status is None or issue["status"] == status)
        and (customer_id is None or issue["customer_id"] == customer_id)
    ]


def get_issue(issue_id):
    for n, issue in enumerate(ISSUES):
        if issue["id"] == issue_id:
            comments = [{"author": "customer", "text": _BODIES[n % 6]}]
            if n % 2:
                comments.append({"author": issue["assignee"] or "triage@example.com", "text": f"Looking into it ({n} similar)."})
            return dict(issue, body=_BODIES[n % 6], comments=comments)
    raise ToolError("not_found", f"no issue `{issue_id}`")


def update_issue(issue_id, status=None, assignee=None, note=None):
    issue = get_issue(issue_id)
    if status is not None and status not in ("open", "in_progress", "closed"):
        raise ToolError("invalid_argument", f"unknown status `{status}`")
    return {"id": issue_id, "status": status or issue["status"], "assignee": assignee or issue["assignee"], "updated": True}


def get_customer(customer_id):
    return dict(_customer(customer_id))


def list_customers(region=None, tier=None):
    return [
        {"id": c["id"], "name": c["name"], "tier": c["tier"], "region": c["region"]}
        for c in CUSTOMERS
        if (region is None or c["region"] == region) and (tier is None or c["tier"] == tier)
    ]


def get_contract(customer_id):
    customer = _customer(customer_id)
    if customer_id not in CONTRACTS:
        raise ToolError("not_found", f"no contract on file for customer `{customer_id}`")
    contract = CONTRACTS[customer_id]
    return {"customer_id": customer_id, "customer": customer["name"], "start_date": contract["start"],
            "end_date": contract["end"], "value": contract["value"], "currency": contract["currency"],
            "auto_renew": contract["auto_renew"], "owner_email": customer["owner_email"]}


def list_invoices(customer_id=None, paid=None):
    return [dict(i) for i in INVOICES
            if (customer_id is None or i["customer_id"] == customer_id) and (paid is None or i["paid"] == paid)]


def convert_currency(amount, from_currency, to_currency):
    for code in (from_currency, to_currency):
        if code not in RATES_TO_USD:
            raise ToolError("invalid_argument", f"unknown currency `{code}`")
    converted = amount * RATES_TO_USD[from_currency] / RATES_TO_USD[to_currency]
    return {"amount": round(converted, 2), "currency": to_currency, "rate": round(RATES_TO_USD[from_currency] / RATES_TO_USD[to_currency], 6)}


def send_email(to, subject, body, cc=None):
    for address in [to] + list(cc or []):
        if "@" not in address:
            raise ToolError("invalid_argument", f"`{address}` is not an email address")
    return {"message_id": "msg-" + _digest(to, subject, body), "to": to, "queued": True}


def create_ticket(title, priority="p3", customer_id=None, tags=None):
    if priority not in ("p1", "p2", "p3"):
        raise ToolError("invalid_argument", f"priority must be p1, p2 or p3, not `{priority}`")
    return {"ticket_id": "T-" + _digest(title, customer_id).upper(), "title": title, "priority": priority, "tags": sorted(tags or [])}


def search_docs(query, limit=3):
    words = [word.lower() for word in query.split()]
    scored = []
    for doc in DOCS:
        text = (doc["title"] + " " + doc["body"]).lower()
        score = sum(text.count(word) for word in words)
        if score:
            scored.append({"doc_id": doc["doc_id"], "title": doc["title"], "score": score, "snippet": doc["body"][:60]})
    scored.sort(key=lambda hit: (-hit["score"], hit["doc_id"]))
    return scored[:limit]


def get_doc(doc_id):
    for doc in DOCS:
        if doc["doc_id"] == doc_id:
            return dict(doc)
    raise ToolError("not_found", f"no document `{doc_id}`")


def list_employees(team=None):
    return [dict(e) for e in EMPLOYEES if team is None or e["team"] == team]


def get_calendar(email, day):
    if email not in CALENDARS:
        raise ToolError("not_found", f"no calendar for `{email}`")
    if day != "2026-12-01":
        return {"email": email, "day": day, "busy": []}
    return {"email": email, "day": day, "busy": [{"start": s, "end": e} for s, e in CALENDARS[email]]}


def list_orders(customer_id=None, page=1, page_size=5):
    matching = [o for o in ORDERS if customer_id is None or o["customer_id"] == customer_id]
    start = (page - 1) * page_size
    chunk = matching[start:start + page_size]
    return {"orders": [{k: o[k] for k in ("order_id", "customer_id", "total", "status", "placed")} for o in chunk],
            "page": page, "next_page": page + 1 if start + page_size < len(matching) else None}


def get_order(order_id):
    for order in ORDERS:
        if order["order_id"] == order_id:
            return json.loads(json.dumps(order))
    raise ToolError("not_found", f"no order `{order_id}`")


def refund_order(order_id, reason, amount=None):
    order = get_order(order_id)
    if order["status"] == "cancelled":
        raise ToolError("conflict", f"order `{order_id}` was cancelled; nothing to refund")
    amount = order["total"] if amount is None else amount
    if amount > order["total"]:
        raise ToolError("invalid_argument", f"refund {amount} exceeds the order total {order['total']}")
    return {"refund_id": "R-" + _digest(order_id, reason, amount), "order_id": order_id, "amount": amount}


def get_weather(city, date):
    if (city, date) not in WEATHER:
        raise ToolError("not_found", f"no forecast for {city} on {date}")
    return dict(WEATHER[(city, date)], city=city, date=date)


def fetch_metrics(service, window="24h"):
    if service == "search" and window == "1h":
        raise ToolError("timeout", "the metrics store timed out; try a longer window")
    if (service, window) not in METRICS:
        raise ToolError("not_found", f"no metrics for `{service}` over {window}")
    return dict(METRICS[(service, window)], service=service, window=window)


def web_search(query, max_results=3):
    words = [word.lower() for word in query.split()]
    hits = [{"url": page["url"], "title": page["title"]} for page in WEB
            if any(word in (page["title"] + " " + page["text"]).lower() for word in words)]
    return hits[:max_results]


def visit_webpage(url):
    for page in WEB:
        if page["url"] == url:
            return f"# {page['title']}\n\n{page['text']}"
    raise ToolError("not_found", f"404 for {url}")


def final_answer(answer):
    return {"accepted": True, "answer": answer}


def crm_search_contacts(query, company=None):
    q = query.lower()
    return [dict(c) for c in CONTACTS
            if (q in c["name"].lower() or q in c["email"]) and (company is None or c["company"] == company)]


def _s(description=None, **kind):
    schema = dict(kind)
    if description:
        schema["description"] = description
    return schema


STR, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
STRS = {"type": "array", "items": {"type": "string"}}

# name: (function, description, properties, required)
TOOLS = {
    "list_issues": (list_issues, "List issues opened on or after a day.", {"opened_after": STR, "status": STR, "customer_id": STR}, ["opened_after"]),
    "get_issue": (get_issue, "One issue with its body and comments.", {"issue_id": STR}, ["issue_id"]),
    "update_issue": (update_issue, "Change an issue's status or assignee.", {"issue_id": STR, "status": STR, "assignee": STR, "note": STR}, ["issue_id"]),
    "get_customer": (get_customer, "A customer: name, tier, region, owner_email, mrr, signed.", {"customer_id": STR}, ["customer_id"]),
    "list_customers": (list_customers, "Customers, optionally by region and tier.", {"region": STR, "tier": STR}, []),
    "get_contract": (get_contract, "A customer's contract.", {"customer_id": STR}, ["customer_id"]),
    "list_invoices": (list_invoices, "Invoices, optionally of one customer and by paid state.", {"customer_id": STR, "paid": BOOL}, []),
    "convert_currency": (convert_currency, "Convert an amount between currencies.", {"amount": NUM, "from_currency": STR, "to_currency": STR}, ["amount", "from_currency", "to_currency"]),
    "send_email": (send_email, "Send an email.", {"to": STR, "subject": STR, "body": STR, "cc": STRS}, ["to", "subject", "body"]),
    "create_ticket": (create_ticket, "Open a ticket.", {"title": STR, "priority": STR, "customer_id": STR, "tags": STRS}, ["title"]),
    "search_docs": (search_docs, "Search the knowledge base.", {"query": STR, "limit": INT}, ["query"]),
    "get_doc": (get_doc, "One knowledge-base document.", {"doc_id": STR}, ["doc_id"]),
    "list_employees": (list_employees, "Employees, optionally of one team.", {"team": STR}, []),
    "get_calendar": (get_calendar, "A person's busy slots on a day (UTC).", {"email": STR, "day": STR}, ["email", "day"]),
    "list_orders": (list_orders, "Orders, a page at a time.", {"customer_id": STR, "page": INT, "page_size": INT}, []),
    "get_order": (get_order, "One order with its items.", {"order_id": STR}, ["order_id"]),
    "refund_order": (refund_order, "Refund an order, in full or in part.", {"order_id": STR, "reason": STR, "amount": NUM}, ["order_id", "reason"]),
    "get_weather": (get_weather, "The forecast for a city on a day.", {"city": STR, "date": STR}, ["city", "date"]),
    "fetch_metrics": (fetch_metrics, "Request metrics of a service over a window (1h, 24h).", {"service": STR, "window": STR}, ["service"]),
    "web_search": (web_search, "Search the web.", {"query": STR, "max_results": INT}, ["query"]),
    "visit_webpage": (visit_webpage, "A web page's text.", {"url": STR}, ["url"]),
    "final_answer": (final_answer, "Give the final answer.", {"answer": {}}, ["answer"]),
    # A name that is no Python identifier: reachable only through call().
    "crm.search_contacts": (crm_search_contacts, "Search CRM contacts by name or email.", {"query": STR, "company": STR}, ["query"]),
}


def definitions():
    """The tool list as the turn gives it: name, description, JSON Schema."""
    return [
        {"name": name, "description": description,
         "input_schema": {"type": "object", "properties": properties, "required": required, "additionalProperties": False}}
        for name, (_, description, properties, required) in TOOLS.items()
    ]


def execute(name, args):
    """Runs a tool: `{"ok": True, "value": …}` or `{"ok": False, "code": …, "message": …}`."""
    if name not in TOOLS:
        return {"ok": False, "code": "tool_not_found", "message": f"there is no tool `{name}`"}
    try:
        value = TOOLS[name][0](**args)
    except ToolError as error:
        return {"ok": False, "code": error.code, "message": error.message}
    except TypeError as error:
        return {"ok": False, "code": "invalid_argument", "message": str(error)}
    # Through JSON, so no caller ever holds the fixture's own objects.
    return {"ok": True, "value": json.loads(json.dumps(value))}


def serve():
    """The tool server: first a line with the tools and the input, then one
    answer line per request line `{"name": …, "args": …}`."""
    print(json.dumps({"tools": definitions(), "input": INPUT}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(execute(request["name"], request["args"])), flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
