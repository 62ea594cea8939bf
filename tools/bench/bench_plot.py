"""bench.py --plot: ms per decode step per model, kiln beside its floor and the peers measured.

One panel per model, each on its own scale (the models differ 10x in time per token); the same
colour for a series in every panel. HF transformers eager is left out: 10-40x slower, it would flatten
the bars that are compared.
"""


def plot(rows, path, subtitle=""):
    """rows: [(model, {series: ms per token})], series in the order they should be drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on the GPU machine
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot: matplotlib is not installed here; {path} not drawn (the table is written)", flush=True)
        return
    if not rows:
        return
    series = []
    for _, values in rows:
        series += [s for s in values if s not in series]
    colors = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(series)}
    fig, axes = plt.subplots(1, len(rows), figsize=(2.2 + 1.0 * len(series) * len(rows), 4.2), squeeze=False)
    for ax, (model, values) in zip(axes[0], rows):
        names = list(values)
        bars = ax.bar(range(len(names)), [values[n] for n in names], color=[colors[n] for n in names])
        ax.bar_label(bars, labels=[f"{values[n]:.2f}" for n in names], fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(model, fontsize=10)
        ax.margins(y=0.15)
    axes[0][0].set_ylabel("ms per token (batch 1 decode)")
    fig.suptitle("Decode ms/token: kiln, its floor (bytes per step / copy bandwidth) and peers; lower is better\n"
                 + subtitle, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    print(f"plot: {path}", flush=True)
