"""The host's runtime for untrusted environment code: launchers for gVisor, bubblewrap or a plain rlimited
process (`launchers.py`, `process.py`), cgroups and seccomp, owned temp dirs, the wire protocol and its
one host-side reply check (`protocol.py`, `replies.py`), and the pool of long-lived workers that the rest of
the project talks to (`host_pool.py`: `HostPool`, sessions, `CallResult`).

What runs *inside* a sandbox is `inside/`: standard library only. This `__init__` imports nothing, because the
worker inside the sandbox imports through it.
"""
