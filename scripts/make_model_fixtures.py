#!/usr/bin/env python3
"""Builds the engine's test fixtures with transformers, torch (CPU) and tokenizers.

Writes under tests/fixtures/ (committed; the C++ tests read only these files, so the test
suite needs no Python):

  tokenizer/tokenizer.json    a byte-level BPE tokenizer trained here on CORPUS (GPT-NeoX's
                              recipe: ByteLevel pre-tokenizer and decoder, NFC normalizer,
                              <|endoftext|> and <|padding|> special tokens)
  tokenizer/cases.json        encode and decode results of the `tokenizers` package
  models/mamba1-hf/           tiny random MambaForCausalLM, save_pretrained (f32) + tokenizer
  models/mamba1-hf-bf16/      the same model saved in bf16
  models/mamba1-ss/           the same weights in the original state-spaces format (tied
                              LM head saved under both names, as mamba_ssm does)
  models/mamba2-hf/           tiny random Mamba2ForCausalLM (n_groups = 2), f32
  models/mamba2-ss/           the same weights in the state-spaces format
  models/*-hf*/expected.safetensors  per prompt: ids, prefill logits at every position, the
                              greedy continuation and the logits of each decode step, all
                              from transformers (generate() runs its cached decode path); the
                              -ss variants share their -hf twin's
  models/<hybrid family>/     GraniteMoeHybrid (MoE + rope, dense + nope), Bamba, Nemotron-H,
                              Falcon-H1 (two), Jamba, Zamba2, with their expected.safetensors,
                              and the tokenizer-split / -spm / -spm-metaspace tokenizers: see
                              scripts/hybrid_fixtures.py

Run: build/venv/bin/python scripts/make_model_fixtures.py [--hybrid-only] [--family=NAME]
(--family: only that function of scripts/hybrid_fixtures.py, e.g. nemotron_h; implies
--hybrid-only)
(scripts/fixtures_venv.sh makes the venv). The output depends only on the seeds below (and on
the torch / transformers versions: the committed files were made with transformers 5.23 for the
Mamba fixtures, 5.24 for the hybrids, each on torch's CPU path).
"""

import copy
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never fetch hub kernels: the torch path is the peer

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
VOCAB = 304          # model vocab: the tokenizer's 300 entries padded to a multiple of 8
TOKENIZER_VOCAB = 300
DECODE_STEPS = 8

# Training text, written for this project (no third-party text): English prose with numbers,
# contractions, punctuation, code-like lines, runs of spaces and some non-ASCII scripts.
CORPUS = """
The state space model reads one token at a time and keeps a small state in memory.
It doesn't look back at every earlier token; it carries what it needs forward.
We're testing 12 layers, 345 heads, 6789 channels and 3.14159 radians per step.
A quick brown fox jumps over the lazy dog. THE LAZY DOG SLEEPS!!! Why? Because.
    def step(state, x):
        return decay * state + x    # four spaces of indent, then code
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 2024-01-31 12:45:59.
Café, naïve, résumé, Zürich, São Paulo, façade, jalapeño, smörgåsbord.
Ελληνικά γράμματα, русский текст, 日本語のテキスト, 中文文本, 한국어 텍스트.
Emoji sometimes appear too: 🙂 🚀 ✨ and symbols like → ≤ ≥ ± × ÷ ∞.
Tabs\tand\tnewlines\nare whitespace as well; so are  double  spaces.
I'll, you'll, she's, they've, we'd, it's, can't, won't, shouldn't.
"""

ENCODE_CASES = [
    "Hello world",
    "The state space model reads one token at a time.",
    " leading space and trailing space ",
    "don't won't I'll they've we'd it's",
    "12345 678.9 2024-01-31",
    "Café naïve Zürich",
    "Cafe\u0301 (a decomposed e-acute, composed by NFC)",
    "日本語のテキスト and 中文文本",
    "emoji 🙂🚀 and ∞",
    "tabs\tand\nnewlines\n\n  indented",
    "multiple     spaces     here",
    "<|endoftext|>after a special token<|endoftext|>",
    "text<|padding|>more",
    "<s>after a start token</s> and an end one",  # the SentencePiece-style tokenizers' specials
    "  two leading spaces, then\nline two",
    "",
    "   ",
    "x",
]

PROMPTS = {  # text prompts, encoded with the tokenizer trained here
    "p0": "The",
    "p1": "It doesn't look back",
    "p2": "A quick brown fox jumps over the lazy dog. Numbers: 12 345",
    "p3": "Café, naïve, 日本語",
}


def train_tokenizer(out_dir: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    # A non-special added token, as GPT-NeoX's tokenizer has for runs of spaces.
    tok.add_tokens([AddedToken("    ", normalized=True)])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    write_cases(tok, out_dir)
    return tok


def write_cases(tok: Tokenizer, out_dir: Path) -> None:
    """cases.json: what the `tokenizers` package encodes ENCODE_CASES to and decodes back, and
    the decoding of random id sequences."""
    cases = []
    for text in ENCODE_CASES:
        ids = tok.encode(text).ids
        cases.append({
            "text": text,
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    # Decoding arbitrary id sequences, including ones that split a multi-byte character.
    g = torch.Generator().manual_seed(7)
    decode_only = []
    for n in (1, 3, 10, 40):
        ids = torch.randint(0, tok.get_vocab_size(), (n,), generator=g).tolist()
        decode_only.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    (out_dir / "cases.json").write_text(json.dumps(
        {"vocab_size": tok.get_vocab_size(), "encode": cases, "decode": decode_only},
        ensure_ascii=False, indent=1) + "\n")


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Moves every parameter off its special initial value (norms at 1, biases at 0, D at 1),
    so that each one affects the logits the test compares."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("A_log"):
                p.add_(0.1 * noise)
            elif "norm" in name or name.endswith(".D"):
                p.copy_(1.0 + 0.2 * noise)
            elif "bias" in name and "dt" not in name:
                p.copy_(0.1 * noise)
            elif "dt" not in name:
                p.copy_(p + 0.02 * noise)


def record(model, prompts: dict, path: Path) -> None:
    """Prefill logits at every position, and generate()'s greedy tokens and per-step logits."""
    tensors = {}
    model.eval()
    with torch.no_grad():
        for key, ids in prompts.items():
            x = torch.tensor([ids])
            logits = model(x).logits[0].float()
            out = model.generate(x, max_new_tokens=DECODE_STEPS, min_new_tokens=DECODE_STEPS,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=1)
            greedy = out.sequences[0, len(ids):]
            steps = torch.stack([s[0].float() for s in out.logits])  # logits before each new token
            # Self-check of the peer: the decode path agrees with a prefill of the whole sequence.
            full = model(out.sequences[:, :-1]).logits[0, len(ids) - 1:].float()
            err = ((steps - full).norm() / full.norm()).item()
            assert err < 1e-4, f"transformers' decode vs its prefill: {err}"
            tensors[f"{key}.ids"] = torch.tensor(ids, dtype=torch.int32)
            tensors[f"{key}.prefill_logits"] = logits.contiguous()
            tensors[f"{key}.greedy_ids"] = greedy.to(torch.int32).contiguous()
            tensors[f"{key}.decode_logits"] = steps.contiguous()
    save_file(tensors, str(path))


def write_state_spaces(model, out_dir: Path, config: dict, keep_lm_head: bool) -> None:
    """The same weights under mamba_ssm's names (backbone.embedding.weight) and config keys."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, p in model.state_dict().items():
        name = name.replace("backbone.embeddings.", "backbone.embedding.")
        state[name] = p.detach().clone().contiguous()
    if keep_lm_head and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["backbone.embedding.weight"].clone()
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def save_hf(model, out_dir: Path, tokenizer_dir: Path, dtype=torch.float32) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    # A copy: .to(bf16) in place would round the caller's f32 weights.
    copy.deepcopy(model).to(dtype).save_pretrained(str(out_dir), safe_serialization=True)
    for extra in ("generation_config.json",):
        (out_dir / extra).unlink(missing_ok=True)
    shutil.copy(tokenizer_dir / "tokenizer.json", out_dir / "tokenizer.json")


def mamba1(tok_dir: Path, prompts: dict) -> None:
    torch.manual_seed(1)
    config = MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                         conv_kernel=4, use_bias=True, use_conv_bias=True, time_step_rank="auto",
                         layer_norm_epsilon=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=0,
                         tie_word_embeddings=True)
    model = MambaForCausalLM(config).float()
    randomize(model, 11)
    out = ROOT / "models" / "mamba1-hf"
    save_hf(model, out, tok_dir)
    record(model, prompts, out / "expected.safetensors")

    # bf16: the checkpoint in bf16; expected logits from those rounded weights, computed in f32.
    out16 = ROOT / "models" / "mamba1-hf-bf16"
    save_hf(model, out16, tok_dir, torch.bfloat16)
    rounded = MambaForCausalLM.from_pretrained(str(out16), dtype=torch.bfloat16).float()
    record(rounded, prompts, out16 / "expected.safetensors")

    ss_config = {"d_model": 32, "n_layer": 2, "vocab_size": TOKENIZER_VOCAB, "pad_vocab_size_multiple": 8,
                 "ssm_cfg": {"d_state": 8, "d_conv": 4, "expand": 2, "dt_rank": "auto", "conv_bias": True,
                             "bias": True},
                 "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True, "tie_embeddings": True}
    write_state_spaces(model, ROOT / "models" / "mamba1-ss", ss_config, keep_lm_head=True)


def full_width_gated_norm(self, hidden_states, gate=None):
    """transformers' Mamba-2 gated norm before it took group_size: one RMS over all of d_inner."""
    dtype = hidden_states.dtype
    h = hidden_states.to(torch.float32)
    if gate is not None:
        h = h * torch.nn.functional.silu(gate.to(torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * h.to(dtype)


def mamba2(tok_dir: Path, prompts: dict) -> None:
    torch.manual_seed(2)
    config = Mamba2Config(vocab_size=VOCAB, hidden_size=32, state_size=16, num_hidden_layers=2, expand=2,
                          num_heads=8, head_dim=8, n_groups=2, conv_kernel=4, chunk_size=8, use_bias=False,
                          use_conv_bias=True, layer_norm_epsilon=1e-5, pad_token_id=1, bos_token_id=0,
                          eos_token_id=0, tie_word_embeddings=False)
    model = Mamba2ForCausalLM(config).float()
    randomize(model, 12)
    out = ROOT / "models" / "mamba2-hf"
    save_hf(model, out, tok_dir)
    record(model, prompts, out / "expected.safetensors")

    # With n_groups = 2 the group-wise gated norm (mamba_ssm's, and transformers' since it
    # added group_size) and the older full-width one give different logits: the fixture
    # tells the two apart.
    from transformers.models.mamba2 import modeling_mamba2
    x = torch.tensor([prompts["p2"]])
    with torch.no_grad():
        grouped = model(x).logits
        saved = modeling_mamba2.MambaRMSNormGated.forward
        modeling_mamba2.MambaRMSNormGated.forward = full_width_gated_norm
        try:
            full = model(x).logits
        finally:
            modeling_mamba2.MambaRMSNormGated.forward = saved
    diff = ((grouped - full).norm() / grouped.norm()).item()
    print(f"mamba2: group-wise vs full-width gated norm, relative logit difference {diff:.3e}")
    assert diff > 1e-3, "the fixture does not distinguish the two gated norms"

    ss_config = {"d_model": 32, "n_layer": 2, "vocab_size": VOCAB, "pad_vocab_size_multiple": 8,
                 "ssm_cfg": {"layer": "Mamba2", "d_state": 16, "d_conv": 4, "expand": 2, "headdim": 8,
                             "ngroups": 2, "chunk_size": 8, "rmsnorm": True, "norm_before_gate": False,
                             "bias": False, "conv_bias": True},
                 "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True, "tie_embeddings": False}
    write_state_spaces(model, ROOT / "models" / "mamba2-ss", ss_config, keep_lm_head=False)


def main() -> int:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tok_dir = ROOT / "tokenizer"
    tok = train_tokenizer(tok_dir)
    prompts = {k: tok.encode(v).ids for k, v in PROMPTS.items()}
    for k, ids in prompts.items():
        print(f"prompt {k}: {len(ids)} tokens")
    only = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--family=")), None)
    if "--hybrid-only" not in sys.argv and only is None:
        mamba1(tok_dir, prompts)
        mamba2(tok_dir, prompts)
    import hybrid_fixtures  # noqa: E402 (beside this script; it uses the helpers above)
    hybrid_fixtures.make_all(ROOT, CORPUS, write_cases, save_hf, record, PROMPTS, only)
    total = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file())
    print(f"fixtures: {total / 1e6:.2f} MB under {ROOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
