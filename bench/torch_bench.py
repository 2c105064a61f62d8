#!/usr/bin/env python3
"""ssmkit.torch against transformers as shipped (its PyTorch path on the CPU) and mambapy, side
by side in one process, on the CPU:

  train     a training step (forward + loss + backward + AdamW) of MambaForCausalLM /
            Mamba2ForCausalLM at the 130m width with fewer layers, B x L tokens: accelerated
            (ssmkit.torch.accelerate), as shipped, and (Mamba-1) with config.use_mambapy
            (mambapy's parallel scan). Median seconds per step over interleaved rounds, each
            step profiled to split its time into the projections' matrix products (self time
            of aten::mm / aten::addmm, nn.Linear forward and backward) and everything else.
  generate  greedy generate() at batch 1: tokens/s of the decode steps (after a 1-token
            prompt), and the time of a prefill of --prompt tokens, accelerated vs as shipped.
  overhead  per-call time of a small op (causal_conv1d_update on (1, 64)) through
            ssmkit.torch, through its raw custom op, and through the numpy API.

Prints one JSON object per measurement. Run through bench/torch_bench.sh (builds the venv).
"""
import argparse
import copy
import json
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the torch path is the peer: no hub kernels

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import ssmkit  # noqa: E402
import ssmkit.torch as st  # noqa: E402

# The projections' matrix products (nn.Linear forward and backward). Batched products
# (aten::bmm: the shipped scans' einsums and matmuls) count as the scan's work, not these.
GEMMS = ("aten::mm", "aten::addmm")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def emit(**record):
    print(json.dumps(record), flush=True)


def make_model(arch, layers, vocab, use_mambapy=False, seed=0):
    """The 130m width (docs/targets.md m1-130m / m2-130m) with `layers` layers."""
    torch.manual_seed(seed)
    if arch == "mamba1":
        config = transformers.MambaConfig(vocab_size=vocab, hidden_size=768, state_size=16,
                                          num_hidden_layers=layers, expand=2, conv_kernel=4,
                                          time_step_rank=48, use_mambapy=use_mambapy)
        return transformers.MambaForCausalLM(config).float()
    config = transformers.Mamba2Config(vocab_size=vocab, hidden_size=768, state_size=128,
                                       num_hidden_layers=layers, expand=2, num_heads=24,
                                       head_dim=64, n_groups=1, chunk_size=256, conv_kernel=4)
    return transformers.Mamba2ForCausalLM(config).float()


def train_step(model, optimizer, ids):
    optimizer.zero_grad(set_to_none=True)
    loss = model(ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    return loss.item()


def profiled(fn):
    """(wall seconds of fn(), self seconds of the projections' matrix products in it)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        fn()
        total = time.perf_counter() - t
    gemm = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in GEMMS) / 1e6
    return total, gemm


def bench_train(a):
    variants = {"accelerated": st.accelerate(make_model(a.arch, a.layers, a.vocab)),
                "shipped": make_model(a.arch, a.layers, a.vocab)}
    if a.arch == "mamba1" and a.mambapy:
        variants["mambapy"] = make_model(a.arch, a.layers, a.vocab, use_mambapy=True)
    ids = torch.randint(0, a.vocab, (a.batch, a.seqlen),
                        generator=torch.Generator().manual_seed(1))
    optimizers = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in variants.items()}
    # A warm-up step for the accelerated model only (first-call costs); the others' steps
    # take long enough that theirs do not matter.
    train_step(variants["accelerated"], optimizers["accelerated"], ids)
    steps = {k: [] for k in variants}
    for r in range(a.rounds):  # interleaved: a load change hits every variant alike
        for k, m in variants.items():
            # Every step runs under the profiler (its overhead is per op: small next to
            # either side's step), which splits it into projections and the rest.
            total, gemm = profiled(lambda m=m, k=k: train_step(m, optimizers[k], ids))
            steps[k].append({"total_s": total, "gemm_s": gemm, "outside_gemm_s": total - gemm})
            emit(bench="train-step", arch=a.arch, variant=k, round=r, **steps[k][-1])

    def median(k, key):
        return statistics.median(s[key] for s in steps[k])

    total = {k: median(k, "total_s") for k in variants}
    outside = {k: median(k, "outside_gemm_s") for k in variants}
    record = dict(bench="train", arch=a.arch, layers=a.layers, vocab=a.vocab, batch=a.batch,
                  seqlen=a.seqlen, rounds=a.rounds, step_s=total,
                  gemm_s={k: median(k, "gemm_s") for k in variants}, outside_gemm_s=outside,
                  speedup_vs_shipped=total["shipped"] / total["accelerated"],
                  outside_gemm_ratio_shipped_over_accelerated=(
                      outside["shipped"] / outside["accelerated"]))
    if "mambapy" in total:
        record["speedup_vs_mambapy"] = total["mambapy"] / total["accelerated"]
    emit(**record)


def decode_tokens_per_s(model, steps, vocab):
    prompt = torch.randint(0, vocab, (1, 1), generator=torch.Generator().manual_seed(2))
    kwargs = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
    model.generate(prompt, max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
    t = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, **kwargs)
    return (out.shape[1] - 1) / (time.perf_counter() - t), out


def prefill_seconds(model, length, vocab):
    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        model(ids, use_cache=True)
        t = time.perf_counter()
        model(ids, use_cache=True)
        return time.perf_counter() - t


def bench_generate(a):
    shipped = make_model(a.arch, a.layers, a.vocab).eval()
    accelerated = st.accelerate(copy.deepcopy(shipped))
    rates = {"accelerated": [], "shipped": []}
    prefill = {"accelerated": [], "shipped": []}
    outputs = {}
    with torch.no_grad():
        for _ in range(a.rounds):
            for k, m in (("accelerated", accelerated), ("shipped", shipped)):
                rate, outputs[k] = decode_tokens_per_s(m, a.steps, a.vocab)
                rates[k].append(rate)
                prefill[k].append(prefill_seconds(m, a.prompt, a.vocab))
    median = {k: statistics.median(v) for k, v in rates.items()}
    prefill_median = {k: statistics.median(v) for k, v in prefill.items()}
    emit(bench="generate", arch=a.arch, layers=a.layers, vocab=a.vocab, decode_steps=a.steps,
         tokens_per_s=median, tokens_per_s_all=rates,
         decode_speedup=median["accelerated"] / median["shipped"],
         same_tokens=bool(torch.equal(outputs["accelerated"], outputs["shipped"])),
         prompt=a.prompt, prefill_s=prefill_median,
         prefill_speedup=prefill_median["shipped"] / prefill_median["accelerated"])


def per_call_us(fn, calls):
    fn()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def bench_overhead(a):
    g = torch.Generator().manual_seed(4)
    x, w, b = torch.randn(1, 64, generator=g), torch.randn(64, 4, generator=g), torch.randn(64)
    state = torch.zeros(1, 64, 4)
    xn, wn, bn, sn = x.numpy(), w.numpy(), b.numpy(), state.numpy().copy()
    emit(bench="overhead", op="causal_conv1d_update (1, 64), K = 4", calls=a.calls,
         torch_us=per_call_us(lambda: st.causal_conv1d_update(x, state, w, b, "silu"), a.calls),
         torch_raw_op_us=per_call_us(
             lambda: torch.ops.ssmkit.causal_conv1d_update(x, state, w, b, True), a.calls),
         numpy_us=per_call_us(lambda: ssmkit.causal_conv1d_update(xn, sn, wn, bn, "silu"),
                              a.calls))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["train", "generate", "overhead"])
    ap.add_argument("--arch", choices=["mamba1", "mamba2"], default="mamba1")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256,
                    help="256 (byte-level, as ssmkit train) keeps the LM head from dominating")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-mambapy", dest="mambapy", action="store_false")
    ap.add_argument("--steps", type=int, default=32, help="generate: decode steps")
    ap.add_argument("--prompt", type=int, default=512, help="generate: prefill length")
    ap.add_argument("--calls", type=int, default=2000, help="overhead: calls per timing")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ssmkit.set_num_threads(a.threads)
    emit(bench="setup", cpu=cpu_name(), threads=a.threads, torch=torch.__version__,
         transformers=transformers.__version__, numpy=np.__version__,
         omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"), load=os.getloadavg())
    {"train": bench_train, "generate": bench_generate, "overhead": bench_overhead}[a.what](a)


if __name__ == "__main__":
    main()
