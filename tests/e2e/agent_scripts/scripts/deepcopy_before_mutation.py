# copy.deepcopy a tool result before editing it, so the original stays intact.
import copy

order = unwrap(get_order(order_id="A-1002"))
draft = copy.deepcopy(order)
for item in draft["items"]:
    item["qty"] *= 2
draft["total"] = round(draft["total"] * 2, 2)
shallow = copy.copy(order)
shallow["status"] = "draft"
{"original_qty": [i["qty"] for i in order["items"]], "draft_qty": [i["qty"] for i in draft["items"]],
 "original_status": order["status"], "draft_total": draft["total"]}
