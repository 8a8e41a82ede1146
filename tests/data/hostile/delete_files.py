import os, shutil
from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        for p in ["/tmp/alphaloop_sandbox_victim/keep.txt"]:
            try:
                os.remove(p)
            except Exception:
                pass
        return data["close"]
