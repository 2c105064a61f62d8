"""One JAX training step (forward + backward, jax.jit(jax.value_and_grad)) of the
`policy-train` network of docs/targets.md on CPU: ssmkit.jax's fused ops (XLA FFI, custom_vjp)
against the same network on pure-JAX references of the ops, side by side in one run.

The network (python/tests/mamba_model.py): input embedding 287 -> d_model 256, 2 Mamba-1
layers (expand 2: D = 512, N = 16, dt_rank 16, conv width 4), add + RMSNorm between them, a
linear head to 16 outputs, mean-squared-error loss. B = 256, L = 60.

The peers, both pure JAX from python/tests/jax_references.py, differing only in the scan:
  jax-scan   the selective scan as jax.lax.scan over L (h: (B, D, N) carried)
  jax-assoc  the selective scan as jax.lax.associative_scan over L
Both peers and ssmkit share the GEMMs (projections), which XLA runs the same way in all three.
  floor      (only with --peers ...,floor) not a peer: the scan, conv and norms replaced by
             elementwise stand-ins (a different function), roughly what the rest of the
             network costs. The stand-ins are not free, so it is an estimate, not a bound.

Run: build/venv/bin/python bench/jax_train_step.py [--repeats 10] [--json]
(after scripts/test_python.sh made build/venv and installed the package)
"""
import argparse
import functools
import json
import os
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "tests"))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jax_references  # noqa: E402
import mamba_model  # noqa: E402
import ssmkit  # noqa: E402
import ssmkit.jax  # noqa: E402


def _floor_ops():
    def scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
        return (u * jax.nn.sigmoid(delta + delta_bias[None, :, None]) * D[None, :, None] * z +
                B.sum(1, keepdims=True) + C.sum(1, keepdims=True) + A.sum())

    def conv(x, weight, bias=None, activation=None):
        return x * weight[None, :, -1:] + bias[None, :, None]

    def norm(x, weight, bias, residual=None, prenorm=False, eps=1e-5):
        r = x if residual is None else x + residual
        return (r * weight, r) if prenorm else r * weight

    return types.SimpleNamespace(selective_scan_fn=scan, causal_conv1d_fn=conv, rms_norm_fn=norm)


def peers():
    assoc = types.SimpleNamespace(**{k: getattr(jax_references, k) for k in dir(jax_references)
                                     if not k.startswith("_")})
    assoc.selective_scan_fn = functools.partial(jax_references.selective_scan_fn,
                                                method="associative")
    return {"ssmkit": ssmkit.jax, "jax-scan": jax_references, "jax-assoc": assoc,
            "floor": _floor_ops()}


def time_steps(steps, params, x, target, repeats, min_seconds):
    """Compiles every step, warms each up for at least min_seconds, then times `repeats` rounds
    in which every peer runs one step in turn, so that a change in the machine's load falls on
    all peers alike. Returns {name: (compile seconds, step seconds, process CPU seconds per
    step, (loss, grads))}: CPU time (all threads) is the steadier figure on a shared machine."""
    results = {}
    for name, step in steps.items():
        t0 = time.perf_counter()
        result = jax.block_until_ready(step(params, x, target))
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < min_seconds:
            result = jax.block_until_ready(step(params, x, target))
        results[name] = (compile_s, [], [], result)
    for _ in range(repeats):
        for name, step in steps.items():
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(step(params, x, target))
            results[name][1].append(time.perf_counter() - t0)
            results[name][2].append(time.process_time() - c0)
    return results


def max_rel_err(grads, want):
    errs = []
    for g, w in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        errs.append(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))
    return max(errs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--d-in", type=int, default=287)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-state", type=int, default=16)
    parser.add_argument("--d-out", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument("--peers", default="ssmkit,jax-scan,jax-assoc",
                        help="comma-separated, from ssmkit, jax-scan, jax-assoc, floor")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    params = mamba_model.init_params(rng, args.d_in, args.d_model, args.layers, args.d_out,
                                     d_state=args.d_state)
    params = jax.tree_util.tree_map(jax.numpy.asarray, params)
    x = jax.numpy.asarray(rng.standard_normal((args.batch, args.length, args.d_in), np.float32))
    target = jax.numpy.asarray(
        rng.standard_normal((args.batch, args.length, args.d_out), np.float32))
    n_params = sum(np.size(p) for p in jax.tree_util.tree_leaves(params))

    header = (f"policy-train training step (fwd+bwd), B={args.batch} L={args.length} "
              f"d_in={args.d_in} d_model={args.d_model} D={2 * args.d_model} N={args.d_state} "
              f"layers={args.layers}, {n_params} parameters; jax {jax.__version__}, "
              f"{os.cpu_count()} CPUs, ssmkit threads {ssmkit.num_threads()}")
    if not args.json:
        print(header)
        print(f"{'peer':<10} {'compile s':>9} {'median ms':>10} {'min ms':>9} {'vs ssmkit':>9} "
              f"{'cpu ms':>9} {'cpu vs':>7} {'max grad rel err':>17}")
    all_peers = peers()
    names = args.peers.split(",")
    steps = {name: jax.jit(jax.value_and_grad(
        lambda p, x, t, ops=all_peers[name]: mamba_model.mse_loss(ops, p, x, t)))
        for name in names}
    results = time_steps(steps, params, x, target, args.repeats, args.warmup_seconds)
    ours = results.get("ssmkit")
    ours_ms = 1e3 * float(np.median(ours[1])) if ours else float("nan")
    ours_cpu_ms = 1e3 * float(np.median(ours[2])) if ours else float("nan")
    rows = []
    for name in names:
        compile_s, times, cpu_times, (loss, grads) = results[name]
        median_ms, min_ms = 1e3 * float(np.median(times)), 1e3 * min(times)
        cpu_ms = 1e3 * float(np.median(cpu_times))
        err = max_rel_err(ours[3][1], grads) if ours and name != "floor" else float("nan")
        ratio, cpu_ratio = median_ms / ours_ms, cpu_ms / ours_cpu_ms
        rows.append(dict(peer=name, compile_s=compile_s, median_ms=median_ms, min_ms=min_ms,
                         ratio=ratio, cpu_ms=cpu_ms, cpu_ratio=cpu_ratio, loss=float(loss),
                         max_grad_rel_err=err))
        if not args.json:
            print(f"{name:<10} {compile_s:>9.1f} {median_ms:>10.1f} {min_ms:>9.1f} "
                  f"{ratio:>8.2f}x {cpu_ms:>9.1f} {cpu_ratio:>6.2f}x {err:>17.2e}", flush=True)
    if args.json:
        print(json.dumps(dict(workload="policy-train", header=header, rows=rows), indent=1))


if __name__ == "__main__":
    main()
