# Typed records with dataclasses, turned into plain dicts for the result.
from dataclasses import dataclass, field


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class OrderSummary:
    order_id: str
    total: float
    lines: list = field(default_factory=list)

    def units(self):
        return sum(line.qty for line in self.lines)


summaries = []
for order_id in ["B-1001", "A-1002", "B-1003"]:
    order = unwrap(get_order(order_id=order_id))
    summary = OrderSummary(order["order_id"], order["total"])
    for item in order["items"]:
        summary.lines.append(Line(item["sku"], item["qty"]))
    summaries.append(summary)
print(summaries[0])
[{"order": s.order_id, "units": s.units(), "total": s.total} for s in summaries]
