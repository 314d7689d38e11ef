# Pure Python: no calls, only the interpreter.
sum(i * i for i in range(200_000))
