"""The factor template: subclass `Factor` and implement `calc`.

Compatible with the QuantAgent paper's factor classes:

    name          a short identifier
    window_length days of history one value needs (documentation; the engine gives the
                  whole panel and scores every date)
    inputs        the fields `calc` reads, e.g. ["close", "volume"] (empty = all fields)
    input_type    "pandas" (default), "numpy" or "polars": what `data[field]` is

`calc(self, data)` gets `data[field]` as a dates x symbols table and returns one of the
same shape (a pandas DataFrame, a 2-D numpy array or a polars DataFrame). A value on a
date may use that date's data and earlier dates only: the engine checks this by
recomputing the factor with every value after a cutoff replaced by noise.
"""


class Factor:
    name = "factor"
    window_length = 1
    inputs = []
    input_type = "pandas"

    def calc(self, data):
        raise NotImplementedError("a Factor must implement calc(self, data)")
