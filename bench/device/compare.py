#!/usr/bin/env python3
"""Times the peers (mamba_ssm, causal-conv1d) at the cases of bench/cuda_bench.cpp, with the
same byte counts, and prints both side by side with the ratio and the % of measured copy
bandwidth each reaches.

    python3 bench/device/compare.py --ours ours.jsonl [--peers-out peers.jsonl]

Timing as in cuda_bench.cpp: CUDA events around each call, 3 warm-up calls, the median of at
least 10 calls and 200 ms. A peer that cannot be imported or run gets an "error" entry, and
its column says so: nothing is guessed.
Dimension legend: B batch, D channels, L length, N state size, H heads, P head dim, K conv width.
"""
import argparse
import json
import re
import sys
import traceback
import types

import torch

DEV = "cuda"


def time_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, total = [], 0.0
    while len(times) < 10 or (total < 200.0 and len(times) < 10000):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ms = start.elapsed_time(stop)
        times.append(ms)
        total += ms
    times.sort()
    return times[len(times) // 2]


def uniform(shape, lo, hi, dtype=torch.float32):
    return (torch.rand(shape, device=DEV, dtype=torch.float32) * (hi - lo) + lo).to(dtype)


def import_mamba(what):
    """Imports from mamba_ssm; without its CUDA extension (Triton ops only) a stand-in module
    lets the package import, and selective_scan_fn then fails at its call."""
    try:
        import selective_scan_cuda  # noqa: F401
    except ImportError:
        sys.modules["selective_scan_cuda"] = types.ModuleType("selective_scan_cuda")
    module, name = what.rsplit(".", 1)
    return getattr(__import__(module, fromlist=[name]), name)


def scan_cases(B, D, N, L, dtype):
    fn = import_mamba("mamba_ssm.ops.selective_scan_interface.selective_scan_fn")
    u = uniform((B, D, L), -1, 1, dtype).requires_grad_()
    delta = uniform((B, D, L), -4, -1, dtype).requires_grad_()
    A = uniform((D, N), -4, -0.5).requires_grad_()
    Bm = uniform((B, N, L), -1, 1, dtype).requires_grad_()
    Cm = uniform((B, N, L), -1, 1, dtype).requires_grad_()
    Dv = uniform((D,), -1, 1).requires_grad_()
    z = uniform((B, D, L), -1, 1, dtype).requires_grad_()
    bias = uniform((D,), -0.5, 0.5).requires_grad_()
    dout = uniform((B, D, L), -1, 1, dtype)
    params = [u, delta, A, Bm, Cm, Dv, z, bias]

    def fwd():
        with torch.no_grad():
            fn(u, delta, A, Bm, Cm, Dv, z, bias, delta_softplus=True)

    def fwd_bwd():
        for p in params:
            p.grad = None
        fn(u, delta, A, Bm, Cm, Dv, z, bias, delta_softplus=True).backward(dout)

    return fwd, fwd_bwd


def ssd_cases(B, L, H, P, N, dtype):
    fn = import_mamba("mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined")
    x = uniform((B, L, H, P), -1, 1, dtype).requires_grad_()
    dt = uniform((B, L, H), -4, -1, dtype).requires_grad_()
    A = uniform((H,), -8, -1).requires_grad_()
    Bm = uniform((B, L, 1, N), -1, 1, dtype).requires_grad_()
    Cm = uniform((B, L, 1, N), -1, 1, dtype).requires_grad_()
    Dv = uniform((H,), -1, 1).requires_grad_()
    z = uniform((B, L, H, P), -1, 1, dtype).requires_grad_()
    bias = uniform((H,), -0.5, 0.5).requires_grad_()
    dout = uniform((B, L, H, P), -1, 1, dtype)
    params = [x, dt, A, Bm, Cm, Dv, z, bias]

    def call():
        return fn(x, dt, A, Bm, Cm, 256, D=Dv, z=z, dt_bias=bias, dt_softplus=True)

    def fwd():
        with torch.no_grad():
            call()

    def fwd_bwd():
        for p in params:
            p.grad = None
        call().backward(dout)

    return fwd, fwd_bwd


def step_case(B, H, P, N):
    fn = import_mamba("mamba_ssm.ops.triton.selective_state_update.selective_state_update")
    bf = torch.bfloat16
    if P == 0:  # Mamba-1: state (B, D, N)
        state = uniform((B, H, N), -1, 1)
        x, z = uniform((B, H), -1, 1, bf), uniform((B, H), -1, 1, bf)
        dt = uniform((B, H), -4, -1, bf)
        A = uniform((H, N), -4, -0.5)
        Bm, Cm = uniform((B, N), -1, 1, bf), uniform((B, N), -1, 1, bf)
        Dv, bias = uniform((H,), -1, 1), uniform((H,), -0.5, 0.5)
    else:  # Mamba-2: per-head values broadcast with stride 0, as Mamba2.step passes them
        state = uniform((B, H, P, N), -1, 1)
        x, z = uniform((B, H, P), -1, 1, bf), uniform((B, H, P), -1, 1, bf)
        dt = uniform((B, H), -4, -1, bf)[:, :, None].expand(B, H, P)
        A = uniform((H,), -8, -1)[:, None, None].expand(H, P, N)
        Bm, Cm = uniform((B, 1, N), -1, 1, bf), uniform((B, 1, N), -1, 1, bf)
        Dv = uniform((H,), -1, 1)[:, None].expand(H, P)
        bias = uniform((H,), -0.5, 0.5)[:, None].expand(H, P)
    return lambda: fn(state, x, dt, A, Bm, Cm, D=Dv, z=z, dt_bias=bias, dt_softplus=True)


def conv_cases(B, D, L, K):
    from causal_conv1d import causal_conv1d_fn
    x = uniform((B, D, L), -1, 1, torch.bfloat16).requires_grad_()
    w = uniform((D, K), -0.5, 0.5).requires_grad_()
    bias = uniform((D,), -0.5, 0.5).requires_grad_()
    dout = uniform((B, D, L), -1, 1, torch.bfloat16)

    def fwd():
        with torch.no_grad():
            causal_conv1d_fn(x, w, bias, activation="silu")

    def fwd_bwd():
        for p in (x, w, bias):
            p.grad = None
        causal_conv1d_fn(x, w, bias, activation="silu").backward(dout)

    return fwd, fwd_bwd


def conv_update_case(B, D, K):
    from causal_conv1d import causal_conv1d_update
    x = uniform((B, D), -1, 1, torch.bfloat16)
    state = uniform((B, D, K), -1, 1, torch.bfloat16)  # causal-conv1d keeps the state in x's dtype
    w, bias = uniform((D, K), -0.5, 0.5), uniform((D,), -0.5, 0.5)
    return lambda: causal_conv1d_update(x, state, w, bias, activation="silu")


def copy_case():
    a = torch.empty(1 << 28, device=DEV, dtype=torch.float32).fill_(1.0)
    b = torch.empty_like(a)
    return lambda: b.copy_(a)


def peer_plan():
    """(case name as in cuda_bench.cpp, peer name, builder returning {suffix: fn})."""
    bf, f32 = torch.bfloat16, torch.float32
    plan = [("copy", "torch", lambda: {"": copy_case()})]
    for name, args in [("scan m1-2.8b B=8 D=5120 N=16 L=2048 bf16", (8, 5120, 16, 2048, bf)),
                       ("scan policy B=1 D=512 N=16 L=60 f32", (1, 512, 16, 60, f32))]:
        plan.append((name, "mamba_ssm selective_scan_fn",
                     lambda a=args: dict(zip([" fwd", " fwd+bwd"], scan_cases(*a)))))
    for name, args in [("ssd m2-130m B=8 L=2048 H=24 P=64 N=128 bf16", (8, 2048, 24, 64, 128, bf)),
                       ("ssd m2-2.7b B=8 L=2048 H=80 P=64 N=128 bf16", (8, 2048, 80, 64, 128, bf))]:
        plan.append((name, "mamba_ssm mamba_chunk_scan_combined",
                     lambda a=args: dict(zip([" fwd", " fwd+bwd"], ssd_cases(*a)))))
    for b in (1, 16):
        plan.append((f"step m1-130m B={b} D=1536 N=16", "mamba_ssm selective_state_update",
                     lambda b=b: {"": step_case(b, 1536, 0, 16)}))
        plan.append((f"step m2-130m B={b} H=24 P=64 N=128", "mamba_ssm selective_state_update",
                     lambda b=b: {"": step_case(b, 24, 64, 128)}))
        plan.append((f"conv-update m1-130m B={b} D=1536 K=4", "causal-conv1d causal_conv1d_update",
                     lambda b=b: {"": conv_update_case(b, 1536, 4)}))
    plan.append(("conv m1-2.8b B=8 D=5120 L=2048 K=4 bf16", "causal-conv1d causal_conv1d_fn",
                 lambda: dict(zip([" fwd", " fwd+bwd"], conv_cases(8, 5120, 2048, 4)))))
    return plan


def warm_triton():
    """Compiles mamba_chunk_scan_combined's Triton kernels at the benchmark's shapes: the first
    call of each takes tens of seconds, which would otherwise fall inside the device call's
    timing phase. Needs only mamba_ssm's Python files (no CUDA extension)."""
    bf = torch.bfloat16
    for args in [(8, 2048, 24, 64, 128, bf), (8, 2048, 80, 64, 128, bf)]:
        for fn in ssd_cases(*args):
            fn()
    torch.cuda.synchronize()
    print("Triton kernels of mamba_chunk_scan_combined compiled", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="JSON lines from ssmkit_cuda_bench")
    ap.add_argument("--warm", action="store_true",
                    help="only run mamba_ssm's Triton SSD once at each shape (compiles its kernels "
                         "into Triton's cache while the peers' CUDA extensions build) and exit")
    ap.add_argument("--peers-out", default=None)
    ap.add_argument("--peers-in", action="append", default=[],
                    help="peers.jsonl of an earlier run in the same call: its cases are not timed again")
    ap.add_argument("--cases", default="",
                    help="time only the peers of cases matching this regular expression")
    args = ap.parse_args()
    if args.warm:
        warm_triton()
        return
    ours = []  # one row per case and kernel variant, in the order timed
    with open(args.ours) as f:
        for line in f:
            if line.startswith("{"):
                ours.append(json.loads(line))
    peers = {}
    # Each result is written as soon as it is measured: a call cut short keeps what it timed.
    peers_out = open(args.peers_out, "w") if args.peers_out else None

    def record(key, entry):
        peers[key] = entry
        if peers_out:
            peers_out.write(json.dumps({"case": key, **entry}) + "\n")
            peers_out.flush()

    for path in args.peers_in:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    record(r.pop("case"), r)
    # Only the cases ssmkit timed (ssmkit_cuda_bench --cases may have narrowed them).
    timed = {r["case"] for r in ours}
    for case, peer, build in peer_plan():
        if case in peers or (case + " fwd") in peers or not re.search(args.cases, case):
            continue
        if case not in timed and (case + " fwd") not in timed:
            continue
        try:
            fns = build()
        except Exception as e:  # the peer is missing or refused the shapes: say so
            print(f"peer {peer} for {case}: {type(e).__name__}: {e}", file=sys.stderr)
            for suffix in ("", " fwd", " fwd+bwd"):
                record(case + suffix, {"peer": peer, "error": f"{type(e).__name__}: {e}"})
            continue
        for suffix, fn in fns.items():
            try:
                record(case + suffix, {"peer": peer, "ms": time_ms(fn)})
            except Exception as e:
                traceback.print_exc()
                record(case + suffix, {"peer": peer, "error": f"{type(e).__name__}: {e}"})
        torch.cuda.empty_cache()
    if peers_out:
        peers_out.close()

    copy_ours = next((r["gbps"] for r in ours if r["case"] == "copy"), None)
    copy_peer = peers.get("copy", {}).get("ms")
    copy_peer_gbps = (2 * (1 << 30)) / (copy_peer * 1e-3) / 1e9 if copy_peer else None
    print(f"\ncopy bandwidth (read + write): ssmkit's cudaMemcpy {copy_ours} GB/s, "
          f"torch copy_ {copy_peer_gbps and round(copy_peer_gbps, 1)} GB/s; % below are of ssmkit's figure")
    print(f"{'case':52s} {'variant':>18s} {'ssmkit ms':>10s} {'peer ms':>10s} {'peer/ours':>9s} {'ours %bw':>8s} {'peer %bw':>8s}  peer")
    best = {}  # case -> the fastest variant's row
    for r in ours:
        case = r["case"]
        if case == "copy":
            continue
        if case not in best or r["ms"] < best[case]["ms"]:
            best[case] = r
        p = peers.get(case, {})
        ours_ms, bytes_ = r["ms"], r["bytes"]
        pct = lambda ms: f"{100 * bytes_ / (ms * 1e-3) / 1e9 / copy_ours:7.1f}%" if copy_ours and ms else "      -"
        head = f"{case:52s} {r.get('variant', 'default'):>18s} {ours_ms:10.4f}"
        if "ms" in p:
            print(f"{head} {p['ms']:10.4f} {p['ms'] / ours_ms:9.2f} {pct(ours_ms)} {pct(p['ms'])}  {p['peer']}")
        else:
            print(f"{head} {'-':>10s} {'-':>9s} {pct(ours_ms)} {'-':>8s}  {p.get('peer', 'none')}: {p.get('error', 'not run')[:60]}")
    print("\nfastest variant per case:")
    for case, r in best.items():
        print(f"  {case:52s} {r.get('variant', 'default'):>18s} {r['ms']:10.4f} ms")


if __name__ == "__main__":
    main()
