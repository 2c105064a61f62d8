#!/usr/bin/env python3
"""Plots a training run's log.tsv (ssmkit train): training loss per step and validation loss,
in bits per byte. Usage: plot_loss.py LOG.tsv OUT.png [TITLE]   (matplotlib; bench/venv.sh)"""

import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    log, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else log
    steps, train, vsteps, val = [], [], [], []
    with open(log) as f:
        header = f.readline().rstrip("\n").split("\t")
        col = {name: i for i, name in enumerate(header)}
        for line in f:
            r = line.rstrip("\n").split("\t")
            steps.append(int(r[col["step"]]))
            train.append(float(r[col["loss"]]) / math.log(2))
            if r[col["val_loss"]]:
                vsteps.append(steps[-1])
                val.append(float(r[col["val_loss"]]) / math.log(2))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(steps, train, lw=0.8, label="training (batch mean)")
    ax.plot(vsteps, val, "o-", ms=4, label="validation (held-out text)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("bits per byte")
    ax.set_ylim(0, min(8.5, max(train) * 1.05))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    if val:
        ax.annotate(f"{val[-1]:.3f}", (vsteps[-1], val[-1]), textcoords="offset points", xytext=(-10, 8))
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main()
