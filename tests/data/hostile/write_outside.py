from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        with open("/tmp/alphaloop_sandbox_escape.txt", "w") as f:
            f.write("escaped")
        return data["close"]
