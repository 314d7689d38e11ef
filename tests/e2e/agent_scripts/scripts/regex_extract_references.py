# Pull order numbers, error codes and invoice ids out of issue bodies.
import re

ORDER = re.compile(r"#(?P<prefix>[AB])-(?P<number>\d{4})")
ERROR = re.compile(r"\bE(\d{4})\b")
found = {"orders": [], "errors": set(), "invoices": []}
for issue in unwrap(list_issues(opened_after="2026-11-25")):
    detail = unwrap(get_issue(issue_id=issue["id"]))
    for match in ORDER.finditer(detail["body"]):
        found["orders"].append(f"{match.group('prefix')}-{match.group('number')}")
    found["errors"].update("E" + code for code in ERROR.findall(detail["body"]))
    invoice = re.search(r"INV-\d{4}-\d{3}", detail["body"])
    if invoice:
        found["invoices"].append((issue["id"], invoice.group(0)))
    amounts = re.findall(r"(\d{1,3}(?:,\d{3})*\.\d{2}) EUR", detail["body"])
    if amounts:
        print(issue["id"], "amounts:", [float(a.replace(",", "")) for a in amounts])
{"orders": sorted(set(found["orders"])), "errors": sorted(found["errors"]), "invoices": found["invoices"]}
