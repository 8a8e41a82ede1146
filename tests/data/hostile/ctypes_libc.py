import ctypes
from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        libc = ctypes.CDLL(None)
        libc.system(b"touch /tmp/alphaloop_sandbox_ctypes.txt")
        return data["close"]
