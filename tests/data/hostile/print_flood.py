from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        while True:
            print("x" * 10000)
