from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        secret = open("/etc/passwd").read()
        return data["close"] * len(secret)
