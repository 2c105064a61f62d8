#!/usr/bin/env python3
"""The steps of bench/llama_cpp_decode.sh: ssmkit's decode against llama.cpp's on the same
random mamba-130m-shaped checkpoint (batch 1, greedy).

  checkpoint  a random MambaForCausalLM / Mamba2ForCausalLM of the docs/targets.md m1-130m / m2-130m
              shapes, saved with save_pretrained (f32, and a bf16 copy of the same weights),
              with the fixtures' tokenizer.json (both engines need one to load the checkpoint;
              the prompt is the same token ids for both)
  convert     the checkpoint to GGUF with llama.cpp's convert_hf_to_gguf.py (from the unpacked
              llama-cpp-python sdist), run in this process
  compare     per case: `ssmkit generate` (decode tok/s from its stderr line, generated ids from
              --print-ids) and llama.cpp through llama-cpp-python (n_threads = n_threads_batch
              = --threads), the same prompt ids, greedy, --decode decode steps; one table

Decode time, for both engines: the --decode steps after the first token (which is sampled from
the prefill's logits), each a one-token forward pass plus the greedy choice of the next token;
the prefill is not counted. Each engine's figure is the median of --runs runs, the two engines'
runs interleaved.
"""

import argparse
import importlib.util
import json
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


def make_checkpoint(args) -> None:
    import torch
    from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_model_fixtures import randomize  # moves norms, D, biases off their initial values

    torch.manual_seed(args.seed)
    # The shapes of state-spaces/mamba-130m-hf and mamba2-130m (docs/targets.md).
    common = dict(hidden_size=768, num_hidden_layers=24, expand=2, conv_kernel=4, use_conv_bias=True,
                  use_bias=False, layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                  tie_word_embeddings=True)
    if args.arch == "mamba1":
        model = MambaForCausalLM(MambaConfig(vocab_size=50280, state_size=16, time_step_rank="auto", **common))
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


def prompt_ids(model_dir: str) -> list:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")).encode(PROMPT).ids


def run_ssmkit(binary: str, model_dir: str, threads: int, decode: int, ids: list) -> tuple:
    """One `ssmkit generate` run: (decode tokens/s, generated ids)."""
    cmd = [binary, "--threads", str(threads), "generate", "--model", model_dir, "--prompt", PROMPT,
           "--max-tokens", str(decode + 1), "--ignore-eos", "--print-ids"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    lines = {k: v for k, v in (line.split(":", 1) for line in p.stderr.splitlines() if ":" in line)}
    if [int(t) for t in lines["prompt ids"].split()] != ids:
        sys.exit(f"ssmkit tokenized the prompt as {lines['prompt ids']}, the tokenizers package as {ids}")
    generated = [int(t) for t in lines["generated ids"].split()]
    m = re.search(r"decode: (\d+) tokens in ([0-9.]+) s", p.stderr)
    if not m or int(m.group(1)) != decode or len(generated) != decode + 1:
        sys.exit(f"ssmkit did not decode {decode} tokens:\n{p.stderr}")
    return decode / float(m.group(2)), generated


class LlamaCpp:
    """llama.cpp through llama-cpp-python's low-level API: one context, batch 1."""

    def __init__(self, gguf: str, threads: int, n_ctx: int):
        import llama_cpp
        import numpy as np

        self.np = np
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
        """(decode tokens/s, generated ids): a prefill of `ids`, then `decode` steps."""
        self.llm.reset()  # clears the recurrent state
        token = self._forward(ids, 0)
        generated = [token]
        t0 = time.perf_counter()
        for step in range(decode):
            token = self._forward([token], len(ids) + step)
            generated.append(token)
        return decode / (time.perf_counter() - t0), generated


def compare(args) -> None:
    rows = []
    for case in args.case:
        arch, dtype, model_dir, gguf = case.split(",")
        ids = prompt_ids(model_dir)
        peer = LlamaCpp(gguf, args.threads, n_ctx=len(ids) + args.decode + 8)
        ours, theirs = [], []
        for _ in range(args.runs):  # interleaved, so that both see the same changes of load
            ours.append(run_ssmkit(args.ssmkit, model_dir, args.threads, args.decode, ids))
            theirs.append(peer.generate(ids, args.decode))
        del peer
        ours_tok_s = statistics.median(r[0] for r in ours)
        theirs_tok_s = statistics.median(r[0] for r in theirs)
        a, b = ours[0][1][: args.check], theirs[0][1][: args.check]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        rows.append(dict(arch=arch, weights=dtype, ssmkit_tok_s=ours_tok_s, llama_cpp_tok_s=theirs_tok_s,
                         ratio=ours_tok_s / theirs_tok_s, agree=same, checked=len(a), ssmkit_ids=a,
                         llama_cpp_ids=b, ssmkit_runs=[r[0] for r in ours], llama_cpp_runs=[r[0] for r in theirs],
                         prompt_ids=ids))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"decode, batch 1, {args.threads} threads, greedy, prompt of {len(ids)} tokens, {args.decode} decode "
          f"steps, median of {args.runs} runs; ratio = ssmkit / llama.cpp; greedy = leading tokens that agree")
    print(f"{'model':8} {'weights':7} {'engine':10} {'decode tok/s':>12} {'ratio':>6} {'greedy':>7}")
    for r in rows:
        agree = f"{r['agree']}/{r['checked']}"
        print(f"{r['arch']:8} {r['weights']:7} {'llama.cpp':10} {r['llama_cpp_tok_s']:12.1f} {1.0:6.2f} {agree:>7}")
        print(f"{r['arch']:8} {r['weights']:7} {'ssmkit':10} {r['ssmkit_tok_s']:12.1f} {r['ratio']:6.2f} {agree:>7}")
    for r in rows:
        if r["agree"] < r["checked"]:
            print(f"{r['arch']} {r['weights']}: first {r['checked']} ids differ at {r['agree']}:\n"
                  f"  ssmkit    {r['ssmkit_ids']}\n  llama.cpp {r['llama_cpp_ids']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("checkpoint")
    p.add_argument("--arch", choices=["mamba1", "mamba2"], required=True)
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
    p.add_argument("--case", action="append", required=True, help="arch,dtype,checkpoint dir,gguf file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--check", type=int, default=16)
    p.add_argument("--json")
    p.set_defaults(fn=compare)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
