"""Network egress to the outside world: DNS lookup and a TCP connect to a public address."""

import socket


class NetDnsExternal:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = []
        try:
            out.append("dns: " + socket.gethostbyname("pypi.org"))
        except OSError as e:
            out.append(f"dns failed: {e}")
        s = socket.socket()
        s.settimeout(0.5)
        try:
            s.connect(("1.1.1.1", 53))
            out.append("tcp: connected")
        except OSError as e:
            out.append(f"tcp failed: {e}")
        return "; ".join(out), 0.0, True, False, {"interfaces": socket.if_nameindex()}
