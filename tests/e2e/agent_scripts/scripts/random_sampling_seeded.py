# Pick a reproducible sample of customers to survey with a seeded random.
import random

random.seed(7)
customers = unwrap(list_customers())
sample = random.sample([c["id"] for c in customers], 3)
shuffled = [c["name"] for c in customers]
random.shuffle(shuffled)
{"sample": sample, "first": shuffled[0], "coin": random.random() < 0.5}
