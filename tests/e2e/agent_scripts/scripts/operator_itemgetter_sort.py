# Sorting records with operator.itemgetter and attrgetter-free keys.
from operator import itemgetter

customers = [unwrap(get_customer(customer_id=c["id"])) for c in unwrap(list_customers(region="amer"))]
by_tier_then_mrr = sorted(customers, key=itemgetter("tier", "mrr"))
names = list(map(itemgetter("name"), by_tier_then_mrr))
names
