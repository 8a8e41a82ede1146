import os
from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        os.system("touch /tmp/alphaloop_sandbox_system.txt")
        return data["close"]
