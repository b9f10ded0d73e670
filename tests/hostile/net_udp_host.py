"""Network egress over UDP: send datagrams to a host UDP socket on every interface."""

import socket


class NetUdpHost:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = []
        for host in self.ctx["host_ips"]:
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.sendto(b"ESCAPED", (host, self.ctx["udp_port"]))
                out.append(f"{host}: sent")
            except OSError as e:
                out.append(f"{host}: {e}")
        return "; ".join(out), 0.0, True, False, {}
