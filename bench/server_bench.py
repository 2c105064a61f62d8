#!/usr/bin/env python3
"""`ssmkit serve` under concurrent streaming clients (docs/benchmarks.md, "Serving"):
aggregate generated tokens/s and p50 / p99 time to first token (TTFT) and inter-token latency
(ITL) at several client counts, and the TTFT of a request whose 2,000-token prefix an earlier
request left in the prefix state cache, with the cache on and off.

Each client sends streaming completions back to back (a prompt of random token ids, a fixed
max_tokens, ignore_eos), timing every server-sent event; tokens/s is all generated tokens over the
phase's wall time. The client counts run in rounds (1, 8, 32, 64, then again) so that a change in
the machine's load shows as a difference between rounds instead of between client counts; the
table gives each round. The server is started here with the options given after `--` (or
`--url` names one already running, e.g. llama.cpp's llama-server, which speaks the same API).

Usage: bench/server_bench.py [--clients 1,8,32,64] [--rounds 2] [--prompt 64] [--tokens 64]
         [--requests-per-client 2] [--prefix 2000] [--json FILE] -- --preset m2-130m --slots 64
Only the standard library is needed.
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    i = min(len(values) - 1, max(0, int(round(q / 100.0 * (len(values) - 1)))))
    return values[i]


class Target:
    def __init__(self, url, model):
        m = re.match(r"http://([^:/]+):(\d+)", url)
        self.host, self.port, self.model = m.group(1), int(m.group(2)), model

    def stream(self, prompt_ids, max_tokens, timeout=600):
        """(ttft, [event times after the first], tokens) of one streamed completion."""
        body = json.dumps({"model": self.model, "prompt": prompt_ids, "max_tokens": max_tokens,
                           "temperature": 0, "stream": True, "ignore_eos": True}).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
        # TTFT: the first event with a choice. ITL: the gaps between the events before the one
        # that finishes the request, whatever their text: ssmkit sends one per token, its text
        # empty where the token's is held back (an incomplete UTF-8 character) or where the
        # tokenizer has none (the random presets' ids above the byte range); tokens produced
        # while the client's previous event was still unsent go out as one event, whose gap
        # then spans them. Counting only events with text left the presets' ITL empty.
        first, times, tokens = None, [], 0
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                raise RuntimeError(str(event["error"]))
            choices = event.get("choices") or []
            if choices:
                now = time.perf_counter()
                if first is None:
                    first = now
                if choices[0].get("finish_reason") is None:
                    times.append(now)
                    tokens += 1
            usage = event.get("usage")
            if usage:
                tokens = usage.get("completion_tokens", tokens)
        conn.close()
        if first is None:
            raise RuntimeError("no tokens streamed")
        return first - t0, [b - a for a, b in zip(times, times[1:])], tokens


def run_phase(target, clients, requests_per_client, prompt_len, max_tokens, vocab, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(prompt_len)]
               for _ in range(clients * requests_per_client)]
    ttfts, itls, tokens, errors = [], [], [0], []
    lock = threading.Lock()

    def client(i):
        for j in range(requests_per_client):
            try:
                ttft, gaps, n = target.stream(prompts[i * requests_per_client + j], max_tokens)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttfts.append(ttft)
                itls.extend(gaps)
                tokens[0] += n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": clients * requests_per_client,
            "errors": len(errors), "first_error": errors[0] if errors else None,
            "tokens": tokens[0], "seconds": wall, "tokens_per_s": tokens[0] / wall,
            "ttft_p50_ms": 1e3 * percentile(ttfts, 50), "ttft_p99_ms": 1e3 * percentile(ttfts, 99),
            "itl_p50_ms": 1e3 * percentile(itls, 50), "itl_p99_ms": 1e3 * percentile(itls, 99)}


def prefix_ttft(target, prefix_len, suffix_len, reps, vocab, seed):
    """TTFTs of requests extending a prefix an earlier request sent (after it finished)."""
    rng = random.Random(seed)
    prefix = [rng.randrange(vocab) for _ in range(prefix_len)]
    target.stream(prefix, 1)  # leaves the prefix's state in the cache, if there is one
    out = []
    for _ in range(reps):
        suffix = [rng.randrange(vocab) for _ in range(suffix_len)]
        ttft, _, _ = target.stream(prefix + suffix, 1)
        out.append(ttft)
    return out


def start_server(args):
    cmd = [os.path.join(ROOT, "build", "release", "ssmkit"), "--threads", str(args.threads),
           "serve", "--port", "0", *args.server_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if not m:
        proc.kill()
        sys.exit("ssmkit serve did not start: " + line + proc.stdout.read())
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    return proc, m.group(1), line.strip()


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", help="a server already running (else ssmkit serve is started)")
    p.add_argument("--model", default="bench")
    p.add_argument("--threads", type=int, default=2, help="ssmkit's --threads")
    p.add_argument("--clients", default="1,8,32,64")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    p.add_argument("--tokens", type=int, default=64, help="generated tokens per request")
    p.add_argument("--vocab", type=int, default=50000, help="prompt token ids drawn below this")
    p.add_argument("--prefix", type=int, default=2000, help="the cached prefix's tokens (0: skip)")
    p.add_argument("--prefix-reps", type=int, default=5)
    p.add_argument("--json", help="write the results here too")
    p.add_argument("server_args", nargs=argparse.REMAINDER,
                   help="after --: ssmkit serve's options (e.g. --preset m2-130m --slots 64)")
    args = p.parse_args()
    args.server_args = [a for a in args.server_args if a != "--"]
    results = {"phases": [], "prefix": {}}
    servers = []
    if args.url:
        target = Target(args.url, args.model)
        results["server"] = args.url
    else:
        proc, url, banner = start_server(args)
        servers.append(proc)
        target = Target(url, args.model)
        results["server"] = banner
    print(results["server"], flush=True)
    try:
        clients = [int(c) for c in args.clients.split(",") if c]  # --clients '': prefix only
        print(f"{'round':>5} {'clients':>7} {'requests':>8} {'errors':>6} {'tok/s':>8} "
              f"{'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8}  (ms)", flush=True)
        for rnd in range(args.rounds):
            for c in clients:
                r = run_phase(target, c, args.requests_per_client, args.prompt, args.tokens,
                              args.vocab, seed=rnd * 1000 + c)
                r["round"] = rnd
                results["phases"].append(r)
                print(f"{rnd:>5} {c:>7} {r['requests']:>8} {r['errors']:>6} "
                      f"{r['tokens_per_s']:>8.1f} {r['ttft_p50_ms']:>9.1f} "
                      f"{r['ttft_p99_ms']:>9.1f} {r['itl_p50_ms']:>8.1f} {r['itl_p99_ms']:>8.1f}",
                      flush=True)
                if r["errors"]:
                    print("  first error:", r["first_error"], flush=True)
        by = {}
        for r in results["phases"]:
            by.setdefault(r["clients"], []).append(r["tokens_per_s"])
        if 1 in by and 32 in by:
            ratios = [b / a for a, b in zip(by[1], by[32])]
            results["ratio_32_to_1"] = ratios
            print("aggregate tokens/s at 32 clients / at 1, per round:",
                  ", ".join(f"{x:.2f}" for x in ratios), flush=True)
        if args.prefix and not args.url:
            for cache in ("on", "off"):
                stop_server(servers.pop())
                server_args = list(args.server_args)
                if cache == "off":
                    server_args += ["--state-cache-mb", "0"]
                args2 = argparse.Namespace(**{**vars(args), "server_args": server_args})
                proc, url, _ = start_server(args2)
                servers.append(proc)
                t = prefix_ttft(Target(url, args.model), args.prefix, 20, args.prefix_reps,
                                args.vocab, seed=7)
                results["prefix"][cache] = t
                print(f"TTFT of a request extending a {args.prefix}-token prefix sent before, "
                      f"state cache {cache}: median {1e3 * statistics.median(t):.1f} ms "
                      f"({', '.join(f'{1e3 * x:.1f}' for x in t)})", flush=True)
            on, off = (statistics.median(results["prefix"][k]) for k in ("on", "off"))
            results["prefix_ratio"] = on / off
            print(f"cached / uncached: {on / off:.3f}", flush=True)
    finally:
        for proc in servers:
            stop_server(proc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
