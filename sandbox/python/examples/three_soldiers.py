# QuantAgent's "three white soldiers" candlestick factor, rewritten to the template:
# +1 after three rising white candles, each opening inside the previous body and closing
# near its high; -1 for the mirror pattern (three black crows); 0 otherwise.
import numpy as np
from alphaloop_factor import Factor


class ThreeSoldiers(Factor):
    name = "three_soldiers"
    window_length = 3
    inputs = ["open", "high", "low", "close"]
    input_type = "numpy"

    def calc(self, data):
        o, h, l, c = (data[f] for f in ("open", "high", "low", "close"))
        with np.errstate(invalid="ignore", divide="ignore"):
            white = (c > o) & ((h - c) <= 0.25 * (h - l))
            black = (c < o) & ((c - l) <= 0.25 * (h - l))
        out = np.zeros_like(c)
        for sign, candle, rising in ((1.0, white, True), (-1.0, black, False)):
            hit = np.zeros_like(candle)
            hit[2:] = candle[2:] & candle[1:-1] & candle[:-2]
            step = c[1:] > c[:-1] if rising else c[1:] < c[:-1]
            hit[2:] &= step[1:] & step[:-1]
            # each day opens inside the previous day's body
            inside = (o[1:] >= np.minimum(o[:-1], c[:-1])) & (o[1:] <= np.maximum(o[:-1], c[:-1]))
            hit[2:] &= inside[1:] & inside[:-1]
            out[hit] = sign
        out[np.isnan(c)] = np.nan
        return out
