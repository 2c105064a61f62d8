"""The kernels on every SIMD target this build runs on this CPU, one table per target.

For each target (`ssmkit bench --target`), in one process run per suite: the multiply-add floor
(`bench floor`), the Mamba-1 scan (policy, m1-130m), the Mamba-2 SSD (m2-130m) and the decode
steps (`bench step`), each with ggml's time measured in the same run when --ggml names a
test-backend-ops binary (docs/benchmarks.md, "The ggml peer"). Prints markdown tables: time,
the share of the multiply-add floor where one is defined (the SSD: 2 multiply-adds per state
element and step forward, 7 for fwd+bwd), fwd+bwd / fwd, and the ggml ratio.

    python3 bench/simd_targets.py --ssmkit build/release/ssmkit [--ggml PATH] [--threads 2]
"""

import argparse
import json
import re
import subprocess

SSD_STATES = 2048 * 24 * 64 * 128  # m2-130m: L * H * P * N


def bench(args, target, suite, *extra):
    command = [args.ssmkit, "--threads", str(args.threads), "bench", suite, "--json",
               "--runs", str(args.runs), "--target", target, *extra]
    if args.ggml and suite != "floor":
        command += ["--ggml", args.ggml]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def targets_here(ssmkit):
    """The targets the CLI accepts here, from its own error message for an unknown one."""
    done = subprocess.run([ssmkit, "bench", "floor", "--target", "?"], capture_output=True,
                          text=True)
    found = re.search(r"runs here \(([^)]*)\)", done.stderr)
    if not found:
        raise SystemExit("could not read the SIMD targets from: " + done.stderr)
    return [t.strip() for t in found.group(1).split(",")]


def rows_for(args, target):
    floor = bench(args, target, "floor")
    fma_all = [r for r in floor if r["op"] == "fma"][-1]  # the row with every thread
    madds_per_s = 1e9 / fma_all["ns_per_multiply-add"]  # scalar multiply-adds, all threads
    ssd_fwd_floor_ms = 2.0 * SSD_STATES / madds_per_s * 1e3
    rows = []
    for suite, shape in (("scan", "policy"), ("scan", "m1-130m"), ("ssd", "m2-130m")):
        results = bench(args, target, suite, "--shape", shape)
        algo = "sequential" if suite == "scan" else next(
            r["algo"] for r in results if r["algo"].startswith("auto"))
        picked = {r["pass"]: r for r in results if r["algo"] == algo}
        fwd, both = picked["fwd"], picked["fwd+bwd"]
        floor_share = (ssd_fwd_floor_ms / fwd["ms"], 3.5 * ssd_fwd_floor_ms / both["ms"]) \
            if suite == "ssd" else (None, None)
        rows.append((suite, shape, algo, fwd, both, floor_share))
    steps = bench(args, target, "step", "--shape", "decode")
    return madds_per_s, ssd_fwd_floor_ms, rows, steps


def peer(r):
    if "peer_ms" not in r or "measured in this run" not in r.get("peer", ""):
        return "-", "-"
    return f"{r['peer_ms']:.3f}", f"{r['peer_ms'] / r['ms']:.1f}x"


def share(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ssmkit", default="build/release/ssmkit")
    parser.add_argument("--ggml", default="", help="test-backend-ops binary (the peer)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--targets", default="", help="comma-separated; default: all here")
    args = parser.parse_args()
    targets = args.targets.split(",") if args.targets else targets_here(args.ssmkit)
    for target in targets:
        madds, ssd_floor, rows, steps = rows_for(args, target)
        print(f"\n### {target}, {args.threads} threads\n")
        print(f"multiply-adds: {madds * 1e-9:.1f} G/s on {args.threads} threads; SSD m2-130m "
              f"forward floor {ssd_floor:.2f} ms\n")
        print("| op | shape | algo | fwd ms | of floor | fwd+bwd ms | of floor | fwd+bwd / fwd "
              "| ggml fwd ms, same run | vs ggml |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for suite, shape, algo, fwd, both, (f_share, b_share) in rows:
            ggml_ms, ratio = peer(fwd)
            print(f"| {suite} | {shape} | {algo} | {fwd['ms']:.3f} | {share(f_share)} | "
                  f"{both['ms']:.3f} | {share(b_share)} | {both['ms'] / fwd['ms']:.2f}x | "
                  f"{ggml_ms} | {ratio} |")
        print("\n| step | shape | ms | ggml ms, same run | vs ggml |")
        print("|---|---|---|---|---|")
        for r in steps:
            ggml_ms, ratio = peer(r)
            print(f"| {r['algo']} | {r['shape']} | {r['ms']:.4f} | {ggml_ms} | {ratio} |")


if __name__ == "__main__":
    main()
