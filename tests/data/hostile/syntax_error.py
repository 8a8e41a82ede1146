from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        x = data["close"]
        return x.rolling(5).mean() / data["clsoe"]
