#!/usr/bin/env python3
"""The steps of bench/llama_cpp_decode.sh: ssmkit's prefill and decode against llama.cpp's on
the same random checkpoints of the docs/targets.md shapes (batch 1, greedy).

  checkpoint  a random MambaForCausalLM / Mamba2ForCausalLM of the m1-130m / m2-130m shapes (or
              m1-2.8b: --arch mamba1-2.8b, 64 layers of d_model 2560; f32 only), a FalconH1ForCausalLM
              of Falcon-H1-0.5B's published config (--arch falcon-h1-0.5b), or a
              GraniteMoeHybridForCausalLM of granite-4.0-h-350m's published config, saved with
              save_pretrained (f32, and a bf16 copy of the same weights), with the fixtures'
              tokenizer.json (both engines need one to load the checkpoint; the prompt is the
              same token ids for both)
  convert     the checkpoint to GGUF with llama.cpp's convert_hf_to_gguf.py (from the unpacked
              llama-cpp-python sdist), run in this process
  compare     per case: `ssmkit generate` on the checkpoint directory or on a .gguf file (prefill
              and decode tok/s from its stderr line, generated ids from --print-ids) and
              llama.cpp through llama-cpp-python (n_threads = n_threads_batch = --threads) on
              the GGUF file, the same prompt ids, greedy, --decode decode steps; one table
  batched     per GGUF file and batch (--batches, e.g. 1,8): decode tokens/s summed over the
              sequences of `ssmkit bench generate --model FILE` and of llama.cpp's own
              llama-batched-bench on the same file (64-token prompts, 64 decode steps each
              side), runs interleaved; the table gives each engine's batch-B / batch-1 ratio
              (issue 19's batch-8 bar) and ssmkit / llama.cpp at each batch

Prefill time: the prompt (the sentence below repeated --prompt-repeat times) in one forward
pass, with the first token's greedy choice. Decode time: the --decode steps after the first
token, each a one-token forward pass plus the greedy choice of the next token. Each engine's
figure is the median of --runs runs, the two engines' runs interleaved.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "tests" / "fixtures" / "tokenizer" / "tokenizer.json"
PROMPT = "The state space model reads one token at a time"

# granite-4.0-h-350m: the keys of ibm-granite's published config.json that shape the model (as
# the engine's preset of the same name, src/model/preset_config.cpp).
GRANITE_350M = dict(
    attention_bias=False, attention_multiplier=0.015625, embedding_multiplier=12.0,
    hidden_size=768, intermediate_size=2048, logits_scaling=3.0,
    layer_types=["mamba"] * 10 + ["attention"] + ["mamba"] * 2 + ["attention"] + ["mamba"] * 3
    + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4,
    mamba_conv_bias=True, mamba_d_conv=4, mamba_d_head=32, mamba_d_state=128, mamba_n_groups=1,
    mamba_n_heads=48, mamba_proj_bias=False, max_position_embeddings=32768,
    num_attention_heads=12, num_experts_per_tok=0, num_hidden_layers=32, num_key_value_heads=4,
    num_local_experts=0, position_embedding_type="nope", residual_multiplier=0.246,
    rms_norm_eps=1e-5, rope_theta=10000.0, shared_intermediate_size=2048,
    tie_word_embeddings=True, vocab_size=100352, bos_token_id=0, eos_token_id=0, pad_token_id=0)


# falcon-h1-0.5b: the keys of tiiuae/Falcon-H1-0.5B-Base's config.json that shape the model (as
# the engine's preset of the same name): attention and Mamba-2 side by side in every layer, its
# muP multipliers.
FALCON_H1_05B = dict(
    attention_bias=False, attention_in_multiplier=1.0, attention_out_multiplier=0.9375,
    embedding_multiplier=5.656854249492381, head_dim=64, hidden_act="silu", hidden_size=1024,
    intermediate_size=2048, key_multiplier=0.39062499999999994, lm_head_multiplier=0.0390625,
    mamba_chunk_size=128, mamba_conv_bias=True, mamba_d_conv=4, mamba_d_head=64, mamba_d_ssm=1536,
    mamba_d_state=128, mamba_expand=2, mamba_n_groups=1, mamba_n_heads=24,
    mamba_norm_before_gate=False, mamba_proj_bias=False, mamba_rms_norm=False,
    max_position_embeddings=16384, mlp_bias=False, mlp_multipliers=[0.8838834764831844, 0.5859375],
    num_attention_heads=8, num_hidden_layers=36, num_key_value_heads=2, projectors_bias=False,
    rms_norm_eps=1e-5, rope_theta=100000000000.0, ssm_in_multiplier=1.25,
    ssm_multipliers=[0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
    ssm_out_multiplier=0.23570226039551587, tie_word_embeddings=False, vocab_size=32784,
    bos_token_id=0, eos_token_id=0, pad_token_id=0)


def make_checkpoint(args) -> None:
    import torch
    from transformers import (FalconH1Config, FalconH1ForCausalLM, GraniteMoeHybridConfig,
                              GraniteMoeHybridForCausalLM, Mamba2Config,
                              Mamba2ForCausalLM, MambaConfig, MambaForCausalLM)

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_model_fixtures import randomize  # moves norms, D, biases off their initial values

    torch.manual_seed(args.seed)
    # The shapes of state-spaces/mamba-130m-hf and mamba2-130m (docs/targets.md).
    common = dict(hidden_size=768, num_hidden_layers=24, expand=2, conv_kernel=4, use_conv_bias=True,
                  use_bias=False, layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                  tie_word_embeddings=True)
    if args.arch == "mamba1-2.8b":  # state-spaces/mamba-2.8b's shape
        common.update(hidden_size=2560, num_hidden_layers=64)
    if args.arch.startswith("mamba1"):
        model = MambaForCausalLM(MambaConfig(vocab_size=50280, state_size=16, time_step_rank="auto", **common))
    elif args.arch == "granite-350m":
        model = GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(**GRANITE_350M))
    elif args.arch == "falcon-h1-0.5b":
        model = FalconH1ForCausalLM(FalconH1Config(**FALCON_H1_05B))
    else:
        model = Mamba2ForCausalLM(Mamba2Config(vocab_size=50288, state_size=128, num_heads=24, head_dim=64,
                                               n_groups=1, chunk_size=256, **common))
    model = model.float()
    randomize(model, args.seed)
    for out, dtype in ((args.out, torch.float32), (args.bf16_out, torch.bfloat16)):
        if not out:
            continue
        out = Path(out)
        if out.exists():
            shutil.rmtree(out)
        model.to(dtype).save_pretrained(str(out), safe_serialization=True)
        shutil.copy(TOKENIZER, out / "tokenizer.json")
        if args.arch == "granite-350m":
            # save_pretrained spells layer_types linear_attention / full_attention; llama.cpp's
            # converter reads the published files' mamba / attention (as ssmkit reads both).
            config = json.loads((out / "config.json").read_text())
            config["layer_types"] = GRANITE_350M["layer_types"]
            (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        print(f"{args.arch} {str(dtype).removeprefix('torch.')}: {out}")


def convert(args) -> None:
    """Runs convert_hf_to_gguf.py's main() with the given arguments. The fixtures' tokenizer is
    one llama.cpp does not know by the hash of its pre-tokenizer's output; it is GPT-2's
    byte-level regex (GPT-NeoX's recipe), so the converter is told "gpt-2" for it. The prompt's
    ids are handed to both engines as ids, so this only affects the GGUF's tokenizer metadata."""
    script = Path(args.llama_cpp) / "convert_hf_to_gguf.py"
    sys.path[:0] = [str(script.parent), str(script.parent / "gguf-py")]
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["convert_hf_to_gguf"] = module
    spec.loader.exec_module(module)
    try:
        from conversion.base import TextModel  # where the model classes live since 2026
    except ImportError:
        TextModel = module.TextModel
    TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    sys.argv = [str(script), "--outtype", args.outtype, "--outfile", args.outfile, args.model]
    module.main()


def prompt_ids(text: str) -> list:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER)).encode(text).ids


def run_ssmkit(binary: str, model: str, threads: int, decode: int, text: str, ids: list) -> tuple:
    """One `ssmkit generate` run on a checkpoint directory or a .gguf file: (prefill tokens/s,
    decode tokens/s, generated ids)."""
    cmd = [binary, "--threads", str(threads), "generate", "--model", model, "--tokenizer", str(TOKENIZER),
           "--prompt", text, "--max-tokens", str(decode + 1), "--ignore-eos", "--print-ids"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    lines = {k: v for k, v in (line.split(":", 1) for line in p.stderr.splitlines() if ":" in line)}
    if [int(t) for t in lines["prompt ids"].split()] != ids:
        sys.exit(f"ssmkit tokenized the prompt as {lines['prompt ids']}, the tokenizers package as {ids}")
    generated = [int(t) for t in lines["generated ids"].split()]
    pre = re.search(r"prefill: (\d+) tokens in ([0-9.]+) s", p.stderr)
    m = re.search(r"decode: (\d+) tokens in ([0-9.]+) s", p.stderr)
    if not pre or int(pre.group(1)) != len(ids):
        sys.exit(f"ssmkit did not prefill {len(ids)} tokens:\n{p.stderr}")
    if not m or int(m.group(1)) != decode or len(generated) != decode + 1:
        sys.exit(f"ssmkit did not decode {decode} tokens:\n{p.stderr}")
    return len(ids) / float(pre.group(2)), decode / float(m.group(2)), generated


def no_repack() -> bool:
    """LLAMA_NO_REPACK=1: llama.cpp without its weight repacking (extra buffer types), on a CPU
    where its repacked path fails: its AMX kernels crashed (SIGSEGV in ggml_backend_amx_mul_mat)
    on the quantized Mamba files on an Intel Xeon with AMX (docs/benchmarks.md)."""
    return os.environ.get("LLAMA_NO_REPACK") == "1"


class LlamaCpp:
    """llama.cpp through llama-cpp-python's low-level API: one context, batch 1."""

    def __init__(self, gguf: str, threads: int, n_ctx: int):
        import llama_cpp
        import numpy as np

        self.np = np
        if no_repack():
            # Llama() takes its model parameters from this function of the ctypes module.
            defaults = llama_cpp.llama_cpp.llama_model_default_params

            def without_extra_buffers():
                params = defaults()
                params.use_extra_bufts = False
                return params

            llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers
        self.llm = llama_cpp.Llama(model_path=gguf, n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)
        self.n_vocab = self.llm.n_vocab()

    def _forward(self, tokens: list, pos: int) -> int:
        """Runs `tokens` at positions pos..., and returns the argmax of the last one's logits."""
        ctx = self.llm._ctx
        batch = self.llm._batch
        batch.set_batch(batch=tokens, n_past=pos, logits_all=False)
        ctx.decode(batch)
        logits = self.np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(self.n_vocab,))
        return int(logits.argmax())

    def generate(self, ids: list, decode: int) -> tuple:
        """(prefill tokens/s, decode tokens/s, generated ids): a prefill of `ids`, then `decode`
        steps."""
        self.llm.reset()  # clears the recurrent state and the KV cache
        t0 = time.perf_counter()
        token = self._forward(ids, 0)
        t1 = time.perf_counter()
        generated = [token]
        for step in range(decode):
            token = self._forward([token], len(ids) + step)
            generated.append(token)
        return len(ids) / (t1 - t0), decode / (time.perf_counter() - t1), generated


def compare(args) -> None:
    rows = []
    text = " ".join([PROMPT] * args.prompt_repeat)
    ids = prompt_ids(text)
    for case in args.case:
        arch, dtype, ssmkit_model, gguf = case.split(",")
        peer = LlamaCpp(gguf, args.threads, n_ctx=len(ids) + args.decode + 8)
        ours, theirs = [], []
        for _ in range(args.runs):  # interleaved, so that both see the same changes of load
            ours.append(run_ssmkit(args.ssmkit, ssmkit_model, args.threads, args.decode, text, ids))
            theirs.append(peer.generate(ids, args.decode))
        del peer
        median = {name: (statistics.median(r[i] for r in ours), statistics.median(r[i] for r in theirs))
                  for i, name in enumerate(("prefill", "decode"))}
        a, b = ours[0][2][: args.check], theirs[0][2][: args.check]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        row = dict(arch=arch, weights=dtype, agree=same, checked=len(a), ssmkit_ids=a, llama_cpp_ids=b,
                   prompt_tokens=len(ids))
        for i, name in enumerate(("prefill", "decode")):
            row.update({f"ssmkit_{name}_tok_s": median[name][0], f"llama_cpp_{name}_tok_s": median[name][1],
                        f"{name}_ratio": median[name][0] / median[name][1],
                        f"ssmkit_{name}_runs": [r[i] for r in ours], f"llama_cpp_{name}_runs": [r[i] for r in theirs]})
        rows.append(row)
        if args.json:  # after every case, so that a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"batch 1, {args.threads} threads, greedy, prompt of {len(ids)} tokens, {args.decode} decode steps, "
          f"median of {args.runs} runs; ratio = ssmkit / llama.cpp; greedy = leading tokens that agree")
    print(f"{'model':12} {'weights':7} {'engine':10} {'prefill tok/s':>13} {'ratio':>6} {'decode tok/s':>12} "
          f"{'ratio':>6} {'greedy':>7}")
    for r in rows:
        agree = f"{r['agree']}/{r['checked']}"
        for engine, key, pr, dr in (("llama.cpp", "llama_cpp", 1.0, 1.0),
                                    ("ssmkit", "ssmkit", r["prefill_ratio"], r["decode_ratio"])):
            print(f"{r['arch']:12} {r['weights']:7} {engine:10} {r[key + '_prefill_tok_s']:13.1f} {pr:6.2f} "
                  f"{r[key + '_decode_tok_s']:12.1f} {dr:6.2f} {agree:>7}")
    for r in rows:
        if r["agree"] < r["checked"]:
            print(f"{r['arch']} {r['weights']}: first {r['checked']} ids differ at {r['agree']}:\n"
                  f"  ssmkit    {r['ssmkit_ids']}\n  llama.cpp {r['llama_cpp_ids']}")


def batched(args) -> None:
    """Decode tokens/s at each batch: ssmkit's bench generate and llama-batched-bench."""
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for gguf in args.gguf:
        ours = {b: [] for b in batches}
        theirs = {b: [] for b in batches}
        for _ in range(args.runs):  # interleaved
            for b in batches:
                cmd = [args.ssmkit, "--threads", str(args.threads), "bench", "generate", "--model", gguf,
                       "--algo", f"b{b}", "--runs", "1", "--json"]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
                ours[b].append(json.loads(p.stdout)[0]["decode_tokens_per_s"])
            cmd = [args.batched_bench, "-m", gguf, "-c", "4096", "-b", "2048", "-ub", "512", "-npp", "64",
                   "-ntg", "64", "-npl", args.batches, "-t", str(args.threads), "-tb", str(args.threads),
                   "--output-format", "jsonl"] + (["--no-repack"] if no_repack() else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            lines = [json.loads(l) for l in (p.stdout + p.stderr).splitlines() if l.startswith('{"n_kv_max"')]
            if p.returncode != 0 or len(lines) != len(batches):
                sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
            for line in lines:
                theirs[line["pl"]].append(line["speed_tg"])
        row = dict(model=Path(gguf).name, threads=args.threads,
                   ssmkit={b: statistics.median(v) for b, v in ours.items()},
                   llama_cpp={b: statistics.median(v) for b, v in theirs.items()},
                   ssmkit_runs=ours, llama_cpp_runs=theirs)
        rows.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    first = batches[0]
    print(f"decode tokens/s summed over the batch, {args.threads} threads, 64-token prompts, 64 decode steps, "
          f"median of {args.runs} interleaved runs; x{first} = over batch {first} of the same engine")
    print(f"{'model':28} {'batch':>5} {'ssmkit':>9} {'x' + str(first):>6} {'llama.cpp':>10} {'x' + str(first):>6} "
          f"{'ssmkit/llama.cpp':>17}")
    for r in rows:
        a, b = r["ssmkit"], r["llama_cpp"]
        for n in batches:
            print(f"{r['model']:28} {n:5d} {a[n]:9.1f} {a[n] / a[first]:6.2f} {b[n]:10.1f} {b[n] / b[first]:6.2f} "
                  f"{a[n] / b[n]:17.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("checkpoint")
    p.add_argument("--arch", choices=["mamba1", "mamba2", "granite-350m", "falcon-h1-0.5b", "mamba1-2.8b"],
                   required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--bf16-out")
    p.add_argument("--seed", type=int, default=130)
    p.set_defaults(fn=make_checkpoint)
    p = sub.add_parser("convert")
    p.add_argument("--llama-cpp", required=True, help="the llama.cpp source tree (vendor/llama.cpp of the sdist)")
    p.add_argument("--outtype", choices=["f32", "bf16", "f16"], required=True)
    p.add_argument("--outfile", required=True)
    p.add_argument("model")
    p.set_defaults(fn=convert)
    p = sub.add_parser("compare")
    p.add_argument("--ssmkit", required=True)
    p.add_argument("--case", action="append", required=True,
                   help="arch,weights,what ssmkit loads (checkpoint dir or .gguf),gguf file llama.cpp loads")
    p.add_argument("--prompt-repeat", type=int, default=1,
                   help="the prompt sentence this many times (a longer prefill)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--check", type=int, default=16)
    p.add_argument("--json")
    p.set_defaults(fn=compare)
    p = sub.add_parser("batched")
    p.add_argument("--ssmkit", required=True)
    p.add_argument("--batched-bench", required=True, help="llama.cpp's llama-batched-bench binary")
    p.add_argument("--gguf", action="append", required=True, help="a GGUF file both engines load")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json")
    p.set_defaults(fn=batched)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
