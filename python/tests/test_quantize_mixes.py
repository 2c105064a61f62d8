"""`ssmkit quantize --type q4_k_m|q4_k_s|q5_k_m|q5_k_s`: llama-quantize's K-quant mixes, on the
deep checkpoints of every family written (quantize_checkpoints.make_wide(deep=True): d_model 256,
8 layers, Nemotron-H 16), deep enough for the choice by layer to show.

- Every tensor's type is the one the rules give (MIX_TABLE, worked out by hand below from
  llama.cpp's llama_tensor_get_type), general.file_type the mix's llama_ftype.
- The engine's logits on each file against transformers on the file's own weights (a short
  prompt, its activations rounded to 8 bits, and a long one in f32), and against the original
  weights no worse than the file's rounding (test_quantize_hybrid's check_wide_logits).
- With SSMKIT_LLAMA_CPP_BIN naming a llama.cpp build's bin/ directory: llama-quantize itself,
  run on the converter's f32 file of the same checkpoint, chooses the same type for every tensor
  and writes the same general.file_type, for every family written (the Nemotron-H MoE and Jamba
  checkpoints at their wide size too: no hand table for them, whose 8 and 4 experts take
  llama-quantize's expert cases); skipped otherwise.

The rules (no importance matrix), with MoreBits(i, n) = i < n/8 or i >= 7n/8 or
(i - n/8) % 3 == 2; at n = 8 it picks 0, 3, 6 and 7:
  - output.weight, or token_embd.weight when there is none: q6_k;
  - the i-th attn_v (by layer) of n: q6_k in the _M mixes where MoreBits(i, n); q5_k in Q4_K_S
    for i < 4;
  - the i-th ffn_down of n = block_count layers (i its layer when the model has experts):
    q6_k in the _M mixes where MoreBits(i, n); q5_k in Q4_K_S for i < n/8;
  - every other matrix the default, q4_k or q5_k; a matrix whose rows are not whole blocks of
    its type falls back (q4_k to q5_0, ..., or f16), vectors f32 (test_quantize_hybrid's
    expected_type).
A model of exactly 8 experts has more (attn_v, attn_k q8_0, ...), checked by
tests/gguf_tensor_types_test.cpp."""
import os
import subprocess

import pytest

from gguf_files import convert, converter_input
from quantize_checkpoints import WIDE, make_wide, run_quantize
from test_quantize_hybrid import FILE_TYPE, check_wide_logits, expected_type, read_gguf

pytest.importorskip("transformers")

MIXES = ["q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s"]
# The engine against transformers on the file's weights over a short prompt, whose activations
# are rounded to 8 bits per 256 (K-quants) or 32 (the fallbacks) before the integer products
# (test_gguf.ACTIVATION_TOLERANCE): the rounding adds up over the layers, measured at most
# 0.080 over the 8 layers of the Mamba models, 0.033 on the hybrids; bounded with
# headroom. (A long prompt's f32 activations meet the float bar: check_wide_logits.)
DEEP_ACTIVATION_TOLERANCE = 0.12
EVERY_8 = [0, 3, 6, 7]  # MoreBits(i, 8)
# Per family: the LM head llama-quantize sees, and the layers whose attn_v / ffn_down are
# upgraded in the _M mixes (q6_k) and in Q4_K_S (q5_k).
MIX_TABLE = {
    # Tied: the embedding is the head. No attention, no MLP.
    "mamba": dict(head="token_embd.weight"),
    "mamba2": dict(head="output.weight"),
    # attn_v in layers 2 and 5, the 0th and 1st of n = 2: MoreBits(1, 2) (7n/8 = 1). 4 experts:
    # ffn_down_exps and ffn_down_shexp by their own layer, MoreBits(layer, 8); Q4_K_S: layer < 1.
    "granitemoehybrid-moe": dict(head="output.weight", attn_v_m=[5], attn_v_s=[2, 5],
                                 ffn_down_m=EVERY_8, ffn_down_s=[0]),
    # Tied; the shared MLP's ffn_down in every layer, so its position is its layer.
    "granitemoehybrid-dense": dict(head="token_embd.weight", attn_v_m=[5], attn_v_s=[2, 5],
                                   ffn_down_m=EVERY_8, ffn_down_s=[0]),
    "bamba": dict(head="output.weight", attn_v_m=[5], attn_v_s=[2, 5], ffn_down_m=EVERY_8,
                  ffn_down_s=[0]),
    # Attention and MLP in every layer: positions are layers, n = 8 for both.
    "falcon_h1": dict(head="output.weight", attn_v_m=EVERY_8, attn_v_s=[0, 1, 2, 3],
                      ffn_down_m=EVERY_8, ffn_down_s=[0]),
    # 16 layers "M-M*M-M-M*M-M-M-": attn_v in 3 and 9 (MoreBits(1, 2) picks 9); the MLPs in
    # 1, 5, 7, 11, 13, 15 are ffn_down 0..5 of n = 16: MoreBits picks 0, 1 (< 2) and 4 ((4 - 2)
    # % 3 == 2), layers 1, 5, 13 (not 4, not 7); Q4_K_S: positions < 2, layers 1 and 5.
    "nemotron_h": dict(head="output.weight", attn_v_m=[9], attn_v_s=[3, 9],
                       ffn_down_m=[1, 5, 13], ffn_down_s=[1, 5]),
}


def expected_mix_type(name, shape, mix, table):
    """The GGML type name MIX_TABLE's rules give the tensor `name` in a `mix` file."""
    layer = int(name.split(".")[1]) if name.startswith("blk.") else None
    kind = "attn_v" if ".attn_v." in name else "ffn_down" if ".ffn_down" in name else None
    choice = "q4_k" if mix.startswith("q4") else "q5_k"
    if name == table["head"]:
        choice = "q6_k"
    elif kind and mix.endswith("_m") and layer in table.get(f"{kind}_m", []):
        choice = "q6_k"
    elif kind and mix == "q4_k_s" and layer in table.get(f"{kind}_s", []):
        choice = "q5_k"
    return expected_type(name, shape, choice)


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    """The deep checkpoint of a family, made once."""
    made = {}

    def get(family):
        if family not in made:
            made[family] = make_wide(family, tmp_path_factory.mktemp(family), deep=True)
        return made[family]
    return get


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("family", list(MIX_TABLE))
def test_mix_types_and_logits(family, mix, deep, tmp_path):
    directory = deep(family)
    out = str(tmp_path / f"{mix}.gguf")
    report = run_quantize(directory, out, mix)
    meta, tensors = read_gguf(out)
    assert meta["general.file_type"] == FILE_TYPE[mix]
    table = MIX_TABLE[family]
    got = {name: t[0] for name, t in tensors.items()}
    want = {name: expected_mix_type(name, t[1], mix, table) for name, t in tensors.items()}
    assert got == want, {n: (got[n], want[n]) for n in got if got[n] != want[n]}
    # Each upgrade of the table names a tensor of the file (Q5_K_S upgrades none but the head).
    upgrades = {"q4_k_m": ("_m", "Q6_K"), "q5_k_m": ("_m", "Q6_K"), "q4_k_s": ("_s", "Q5_K")}
    if mix in upgrades:
        suffix, upgraded = upgrades[mix]
        for kind in ("attn_v", "ffn_down"):
            for layer in table.get(kind + suffix, []):
                assert any(n.startswith(f"blk.{layer}.{kind}") and got[n] == upgraded
                           for n in got), (kind, layer)
    own = check_wide_logits(family, directory, out, mix, tol=DEEP_ACTIVATION_TOLERANCE)
    print(f"{family} {mix}: {report.strip()}; the file's own error {own:.3g}")


# ---------------------------------------------------------------- llama-quantize itself (opt-in)

LLAMA_CPP_BIN = os.environ.get("SSMKIT_LLAMA_CPP_BIN", "")
LLAMA_QUANTIZE = os.path.join(LLAMA_CPP_BIN, "llama-quantize")


@pytest.fixture(scope="module")
def converted_deep(deep, tmp_path_factory):
    """The converter's f32 file of a family's deep checkpoint, made once."""
    made = {}

    def get(family):
        if family not in made:
            tmp = tmp_path_factory.mktemp(f"{family}-converter")
            source = converter_input(deep(family), str(tmp / "checkpoint"))
            pre = "gpt-2" if family in ("mamba", "mamba2") else "llama-bpe"
            made[family] = convert(source, str(tmp / "f32.gguf"), "f32", pre=pre)
        return made[family]
    return get


@pytest.mark.skipif(not os.path.isfile(LLAMA_QUANTIZE),
                    reason="SSMKIT_LLAMA_CPP_BIN does not name a llama.cpp build's bin/ "
                           "directory with llama-quantize")
@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("family", WIDE)
def test_llama_quantize_chooses_the_same_types(family, mix, deep, converted_deep, tmp_path):
    theirs = str(tmp_path / "llama-quantize.gguf")
    result = subprocess.run([LLAMA_QUANTIZE, converted_deep(family), theirs, mix.upper(), "2"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    ours = str(tmp_path / "ssmkit.gguf")
    run_quantize(deep(family), ours, mix)
    their_meta, their_tensors = read_gguf(theirs)
    our_meta, our_tensors = read_gguf(ours)
    assert our_meta["general.file_type"] == their_meta["general.file_type"] == FILE_TYPE[mix]
    got = {name: t[0] for name, t in our_tensors.items()}
    want = {name: t[0] for name, t in their_tensors.items()}
    assert sorted(got) == sorted(want)
    assert got == want, {n: (got[n], want[n]) for n in got if got[n] != want[n]}
