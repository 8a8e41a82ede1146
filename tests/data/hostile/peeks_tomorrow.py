from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        return data["close"].shift(-1) / data["close"] - 1
