# Arithmetic past 64 bits: a result and a tool argument with a very large int.
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


big = fib(120)
echo = unwrap(create_ticket(title=f"checksum {big}", priority="p3"))
{"fib120": big, "digits": len(str(big)), "ticket": echo["ticket_id"], "power": 3 ** 50}
