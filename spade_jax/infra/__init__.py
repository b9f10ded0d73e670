"""Process plumbing, apart from the algorithm: the hosts of a multi-process job (`hosts.py`, `distributed.py`),
Ctrl-C and SIGTERM turned into a clean stop (`shutdown.py`), glibc malloc settings that keep freed memory
(`malloc.py`) and the compile-seconds meter (`compile_time.py`).
"""
