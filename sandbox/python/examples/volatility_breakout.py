# QuantAgent's volatility-breakout factor, rewritten to the alphaloop template: how far
# today's close broke above yesterday's close plus k times the recent daily range,
# in units of that range.
from alphaloop_factor import Factor


class VolatilityBreakout(Factor):
    name = "volatility_breakout"
    window_length = 20
    inputs = ["high", "low", "close"]

    def calc(self, data):
        high, low, close = data["high"], data["low"], data["close"]
        day_range = (high - low).rolling(self.window_length, min_periods=self.window_length).mean()
        trigger = close.shift(1) + 0.5 * day_range
        return (close - trigger) / day_range
