from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        return data["close"].iloc[:-5, :10]
