#!/usr/bin/env python3
"""Training throughput and loss curves: ssmkit's trainer vs PyTorch training transformers'
MambaForCausalLM (or Mamba2ForCausalLM) on the CPU, the same model, weights, batches and
optimizer, side by side in one run.

1. transformers builds the `tiny` byte-level model (ssmkit train --size tiny) with torch's
   seed and saves it (save_pretrained): the common initial weights.
2. ssmkit trains from them: `ssmkit train --init DIR` (batches from the counter-based sampler
   of src/train/data.hpp, replicated below bit for bit).
3. PyTorch trains the transformers model on the same batches with torch.optim.AdamW (the same
   decayed tensors), clip_grad_norm_ and the same warmup + cosine learning rate.
4. Two phases, each side by side: the loss curves over --steps (50) steps at --batch x --seqlen,
   and the throughput: --rate-steps steps at --rate-batch x --rate-seqlen (8 x 256), the median
   tokens/s of each after the first --rate-warmup steps, and their ratio. transformers then
   loads ssmkit's checkpoint of the curve phase and computes the validation loss ssmkit logged,
   as a check of the format.

--write-fixture DIR also records what the CI test (tests/train_parity_test.cpp) needs, so that
the suite checks the curves without torch: the initial weights, the data, PyTorch's losses,
ssmkit's final checkpoint and transformers' validation loss on it.

Run: bench/train_vs_pytorch.sh (makes the venv, builds ssmkit, runs this).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the torch path is the peer: no hub kernels

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def mix(seed, a, b=0):
    """src/train/random.hpp's Mix: the hash that picks every training window."""
    h = mix64((seed + GAMMA) & MASK)
    h = mix64((h + a + GAMMA) & MASK)
    return mix64((h + b + GAMMA) & MASK)


class Corpus:
    """src/train/data.cpp's ByteCorpus: the same split, training windows and validation windows."""

    def __init__(self, path, val_fraction):
        self.bytes = Path(path).read_bytes()
        size = len(self.bytes)
        self.split = size - int(size * val_fraction)

    def train_batch(self, seed, step, accum, micro, batch, seqlen):
        starts = self.split - seqlen
        rows = []
        for r in range(batch):
            s = mix(seed, step * accum + micro, r) % starts
            rows.append(list(self.bytes[s:s + seqlen + 1]))
        return torch.tensor(rows, dtype=torch.long)

    def val_batches(self, batch, seqlen):
        windows = (len(self.bytes) - self.split - 1) // seqlen
        for first in range(0, windows, batch):
            rows = []
            for r in range(first, min(first + batch, windows)):
                s = self.split + r * seqlen
                rows.append(list(self.bytes[s:s + seqlen + 1]))
            yield torch.tensor(rows, dtype=torch.long)


def tiny_model(arch, seed):
    """ssmkit's --size tiny (TrainSizeConfig), built by transformers with torch's initialisation."""
    torch.manual_seed(seed)
    common = dict(vocab_size=256, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2,
                  conv_kernel=4, use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5,
                  tie_word_embeddings=True, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    if arch == "mamba1":
        return MambaForCausalLM(MambaConfig(time_step_rank=4, **common))
    return Mamba2ForCausalLM(Mamba2Config(num_heads=4, head_dim=32, n_groups=1, chunk_size=64, **common))


def cls_of(arch):
    return MambaForCausalLM if arch == "mamba1" else Mamba2ForCausalLM


def decays(name, p):
    """The tensors ssmkit's AdamW decays (src/train/param_table.cpp): the matrices and conv filters."""
    return p.dim() >= 2 and not name.endswith("A_log")


def lr_at(step, a):
    """src/train/optimizer.cpp's LearningRate."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if step >= a.steps:
        return a.min_lr
    progress = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * progress))


def mean_loss(model, tokens):
    logits = model(input_ids=tokens[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


def train_torch(model, corpus, a, steps):
    decay = [p for n, p in model.named_parameters() if decays(n, p)]
    other = [p for n, p in model.named_parameters() if not decays(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    model.train()
    losses, rates = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(a.accum):
            tokens = corpus.train_batch(a.seed, step, a.accum, k, a.batch, a.seqlen)
            loss = mean_loss(model, tokens) / a.accum
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.step()
        rates.append(a.batch * a.seqlen * a.accum / (time.perf_counter() - t0))
        losses.append(total)
        print(f"  torch  step {step + 1:3d}  loss {total:.5f}  {rates[-1]:8.0f} tok/s", flush=True)
    return losses, rates


@torch.no_grad()
def val_loss(model, corpus, a):
    model.eval()
    total, count = 0.0, 0
    for tokens in corpus.val_batches(a.batch, a.seqlen):
        total += mean_loss(model, tokens).item() * tokens.shape[0] * a.seqlen
        count += tokens.shape[0] * a.seqlen
    return total / count


def train_ssmkit(init_dir, out_dir, data, a, steps):
    cmd = [str(a.ssmkit), "--threads", str(a.threads), "train", "--data", str(data), "--out", str(out_dir),
           "--init", str(init_dir), "--steps", str(steps), "--batch", str(a.batch), "--seqlen", str(a.seqlen),
           "--accum", str(a.accum), "--lr", str(a.lr), "--min-lr", str(a.min_lr), "--warmup", str(a.warmup),
           "--weight-decay", str(a.weight_decay), "--clip", str(a.clip), "--seed", str(a.seed),
           "--val-fraction", str(a.val_fraction), "--eval-every", str(steps), "--save-every", str(steps)]
    print("  " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    rows = [line.split("\t") for line in (out_dir / "log.tsv").read_text().splitlines()[1:]]
    return [float(r[2]) for r in rows], [float(r[6]) for r in rows], float(rows[-1][3])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["mamba1", "mamba2"], default="mamba1")
    ap.add_argument("--data", default=str(ROOT / "build/corpus/kjv.txt"))
    ap.add_argument("--ssmkit", default=str(ROOT / "build/release/ssmkit"))
    ap.add_argument("--threads", type=int, default=2, help="for both: torch.set_num_threads and --threads")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=64)
    ap.add_argument("--rate-steps", type=int, default=8)
    ap.add_argument("--rate-batch", type=int, default=8)
    ap.add_argument("--rate-seqlen", type=int, default=256)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--rate-warmup", type=int, default=2, help="steps left out of the median tokens/s")
    ap.add_argument("--rate-only", action="store_true", help="only the throughput phase")
    ap.add_argument("--write-fixture", default="", help="directory for the CI fixture (tests/fixtures/train/ARCH)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    work = Path(tempfile.mkdtemp(prefix="ssmkit_train_bench_"))
    try:
        init_dir, ours_dir = work / "init", work / "ours"
        model = tiny_model(a.arch, a.seed)
        model.save_pretrained(init_dir, safe_serialization=True)
        nparams = sum(p.numel() for p in model.parameters())
        corpus = Corpus(a.data, a.val_fraction)
        print(f"{a.arch} tiny ({nparams} parameters), batch {a.batch} x {a.seqlen}, {a.steps} steps, "
              f"{a.threads} threads; torch {torch.__version__}", flush=True)

        if not a.rate_only:
            print(f"loss curves ({a.steps} steps, batch {a.batch} x {a.seqlen}): ssmkit", flush=True)
            ours_losses, _, ours_val = train_ssmkit(init_dir, ours_dir, a.data, a, a.steps)
            print("PyTorch (transformers " + type(model).__name__ + "):", flush=True)
            torch_losses, _ = train_torch(model, corpus, a, a.steps)
            rel = [abs(o - t) / abs(t) for o, t in zip(ours_losses, torch_losses)]

        # Throughput: both again from the same initial weights, at the timing shape.
        curve = (a.batch, a.seqlen)
        a.batch, a.seqlen = a.rate_batch, a.rate_seqlen
        print(f"throughput ({a.rate_steps} steps, batch {a.batch} x {a.seqlen}): ssmkit", flush=True)
        _, ours_rates, _ = train_ssmkit(init_dir, work / "rate", a.data, a, a.rate_steps)
        print("PyTorch:", flush=True)
        _, torch_rates = train_torch(cls_of(a.arch).from_pretrained(init_dir), corpus, a, a.rate_steps)
        a.batch, a.seqlen = curve

        ours_rate = statistics.median(ours_rates[a.rate_warmup:])
        torch_rate = statistics.median(torch_rates[a.rate_warmup:])
        tokens = a.rate_batch * a.rate_seqlen * a.accum
        print()
        print(f"| trainer | tokens/s (median, steps {a.rate_warmup + 1}-{a.rate_steps}) | ms/step |")
        print("|---|---|---|")
        for name, r in (("ssmkit", ours_rate), ("PyTorch + transformers", torch_rate)):
            print(f"| {name} | {r:.0f} | {1000 * tokens / r:.1f} |")
        print(f"\nspeedup: {ours_rate / torch_rate:.1f}x")
        if a.rate_only:
            return 0
        print(f"loss curves over {a.steps} steps: max relative difference {max(rel):.2e} "
              f"(step {rel.index(max(rel)) + 1}); first {ours_losses[0]:.5f} vs {torch_losses[0]:.5f}, "
              f"last {ours_losses[-1]:.5f} vs {torch_losses[-1]:.5f}")

        theirs = cls_of(a.arch).from_pretrained(ours_dir)
        hf_val = val_loss(theirs, corpus, a)
        print(f"transformers loads ssmkit's checkpoint: validation loss {hf_val:.6f} vs ssmkit's {ours_val:.6f} "
              f"(relative difference {abs(hf_val - ours_val) / ours_val:.1e})")

        if a.write_fixture:
            fx = Path(a.write_fixture)
            if fx.exists():
                shutil.rmtree(fx)
            fx.mkdir(parents=True)
            shutil.copytree(init_dir, fx / "init", ignore=shutil.ignore_patterns("generation_config.json"))
            (fx / "trained").mkdir()
            for f in ("config.json", "model.safetensors"):
                shutil.copy(ours_dir / f, fx / "trained" / f)
            shutil.copy(a.data, fx / "data.txt")
            (fx / "expected.json").write_text(json.dumps({
                "arch": a.arch, "steps": a.steps, "batch": a.batch, "seqlen": a.seqlen, "accum": a.accum,
                "lr": a.lr, "min_lr": a.min_lr, "warmup": a.warmup, "weight_decay": a.weight_decay,
                "clip": a.clip, "seed": a.seed, "val_fraction": a.val_fraction,
                "torch_losses": torch_losses, "torch_version": torch.__version__,
                "transformers_val_loss_of_trained": hf_val,
            }, indent=1) + "\n")
            print(f"fixture written to {fx}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
