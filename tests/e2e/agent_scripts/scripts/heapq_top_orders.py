# The three largest orders and the two smallest with heapq.
import heapq

orders = unwrap(list_orders(page_size=100))["orders"]
largest = heapq.nlargest(3, orders, key=lambda o: o["total"])
smallest = heapq.nsmallest(2, orders, key=lambda o: o["total"])
heap = []
for o in orders[:6]:
    heapq.heappush(heap, (o["total"], o["order_id"]))
{"largest": [o["order_id"] for o in largest], "smallest": [o["order_id"] for o in smallest], "min": heapq.heappop(heap)}
