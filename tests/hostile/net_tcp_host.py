"""Network egress: connect to a TCP listener the host opened on every interface (loopback and LAN)."""

import socket


class NetTcpHost:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        results = []
        for host in self.ctx["host_ips"]:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(0.3)
            try:
                s.connect((host, self.ctx["tcp_port"]))
                s.sendall(b"ESCAPED")
                results.append(f"{host}: connected")
            except OSError as e:
                results.append(f"{host}: {e}")
            finally:
                s.close()
        return "; ".join(results), 0.0, True, False, {}
