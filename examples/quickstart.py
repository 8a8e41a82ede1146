# %% [markdown]
# # alphaloop from Python
#
# Load the market data, score three alphas, draw one's long-short book, search the
# knowledge base and train the combined model over its best alphas. Runs as a script
# (`python3 examples/quickstart.py`) or cell by cell (`# %%`) in VS Code or Jupyter.
# Needs the package (`pip install ./python`, see docs/python.md) and a knowledge base
# (`alphaloop kb import alpha_kb/seeds/alpha101.toml` makes one of the published alphas).

# %%
import alphaloop as al

panel = al.load()  # the data the CLI finds: $ALPHALOOP_DATA, alphaloop.toml, else the shipped S&P 500 set
print(panel)

# %% Three alphas on the validation period
alphas = {
    "reversal_5d": "rank(delta(close, 5)) * -1",
    "volume_surprise": "-1 * rank(volume / adv20)",
    "range_position": "rank((close - low) / (high - low + 0.001))",
}
scores = al.evaluate_many(alphas, panel, "valid")
print(scores.select("id", "rank_ic", "ic", "rank_icir", "sharpe", "turnover", "coverage"))
print("one alpha, every metric:", al.evaluate(alphas["reversal_5d"], panel, "valid"))

# %% The long-short book of the first: top fifth of stocks minus bottom fifth, next-day returns
signal = al.values(alphas["reversal_5d"], panel, "valid", wide=True)
close = al.values("close", panel, "valid", wide=True)
label = close.shift(-2) / close.shift(-1) - 1  # close(t+1) -> close(t+2), as the metrics' label
ranks = signal.rank(axis=1, pct=True)
book = (label[ranks > 0.8].mean(axis=1) - label[ranks <= 0.2].mean(axis=1)).fillna(0.0)
print(f"long-short book, valid: {book.sum():+.3f} cumulative, {book.mean() / book.std() * 252 ** 0.5:.2f} Sharpe before costs")
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    book.cumsum().plot(title="reversal_5d: long-short book, cumulative daily return (valid)")
    plt.savefig("quickstart-book.png")
    print("wrote quickstart-book.png")
except ImportError:
    print("(matplotlib is not installed: no plot)")

# %% The knowledge base: the alphas nearest an idea, and the best by valid Rank IC
with al.KB() as kb:
    print(kb.search("reversal after a volume spike", 5).select("id", "score", "valid_rank_ic", "code"))
    top = kb.top(by="rank_ic", split="valid", n=10)
print(top.select("id", "valid_rank_ic", "code"))

# %% The combined model over those ten, scored on train, valid and test
report, model = al.train(dict(zip(top["id"], top["code"])), panel)
for split in ("train", "valid", "test"):
    r = report[split]
    print(f"{split:5}  Rank IC {r['rank_ic']:+.4f}  IC {r['ic']:+.4f}  Sharpe (net) {r['sharpe']:+.2f}")
model.save("quickstart-model.json")  # what `alphaloop predict --model` reads
print(model.predict(panel).head(5))
