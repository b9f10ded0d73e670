"""An infinite loop at import time (module level), before any class is defined."""

while True:
    pass
