# Group issues by customer and label with defaultdict and Counter.
from collections import Counter, defaultdict, namedtuple

Row = namedtuple("Row", ["customer", "issues", "top_label"])
issues = unwrap(list_issues(opened_after="2026-11-16"))
by_customer = defaultdict(list)
labels = Counter()
for issue in issues:
    by_customer[issue["customer_id"]].append(issue["id"])
    labels.update(issue["labels"])
rows = []
for cid, ids in sorted(by_customer.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:3]:
    customer_labels = Counter(l for i in issues if i["customer_id"] == cid for l in i["labels"])
    rows.append(Row(unwrap(get_customer(customer_id=cid))["name"], len(ids), customer_labels.most_common(1)[0][0]))
print(rows[0].customer, rows[0].issues)
{"rows": [list(r) for r in rows], "labels": labels.most_common(3), "distinct": len(set(labels))}
