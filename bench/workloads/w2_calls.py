# 50 calls, one after another, to a tool that does nothing.
for i in range(50):
    noop()
