# Tax and discount arithmetic with round() and Decimal.
from decimal import ROUND_HALF_UP, Decimal

rows = []
for invoice in unwrap(list_invoices(customer_id="c1")):
    net = invoice["amount"]
    tax = round(net * 0.2, 2)
    exact = (Decimal(str(net)) * Decimal("0.2")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    rows.append((invoice["id"], net, tax, str(exact)))
{"rows": rows, "half_even": [round(0.5), round(1.5), round(2.5)], "r2675": round(2.675, 2)}
