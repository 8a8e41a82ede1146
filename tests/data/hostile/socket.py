import socket
from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect(("pypi.org", 443))
        return data["close"]
