"""GGUF files written by llama.cpp's converter (gguf_files.py) for the Mamba-1 and Mamba-2
fixture checkpoints, in every type the converter writes (f32, f16, bf16, q8_0), loaded by
ssmkit.Model.load(path.gguf):

- the config read from the metadata matches the checkpoint's;
- the tokenizer built from tokenizer.ggml.* encodes the prompts to the ids transformers'
  tokenizer gave and decodes them back;
- logits at every prefill position and over decode steps against transformers run on the
  file's own numbers (its tensors dequantized by gguf-py): the engine's error on the same
  weights, which for f32 is the safetensors bar and for quantized matrices adds only the
  rounding of the activations to 8 bits;
- against transformers' logits on the original float32 weights, the error is no larger than
  the one the file's quantization itself causes (transformers on the dequantized weights),
  within a small margin.

Dimension legend: L prompt length, V vocab."""
import os

import numpy as np
import pytest

import ssmkit
from checks import assert_close, rel_err
from gguf_files import convert, dequantized_state_dict, transformers_logits
from quantize_checkpoints import CLI, make_wide, run_quantize
from test_model import MODELS, PROMPT_TEXT, TOLERANCE, expected

pytest.importorskip("transformers")

CHECKPOINTS = [("mamba1-hf", "mamba"), ("mamba2-hf", "mamba2")]
TYPES = ["f32", "f16", "bf16", "q8_0"]
# Relative error of the engine against transformers on the same (dequantized) weights. Float
# files: f32 arithmetic. Quantized matrices, up to 64 rows at a time (decode, short prompts):
# each activation row is also rounded to 8 bits per block (32 elements for q8_0 / q4_0 / q4_1 /
# q5_0 / q5_1, 256 for the K-quants, as llama.cpp's Q8_0 / Q8_K) before the integer products;
# measured at most 0.022 (q8_0, q4_0, and q4_1 / q5_0 / q5_1: 0.0224) and 0.038 (K-quants) on
# these models, bounded here with headroom. Longer prompts multiply f32
# activations with the decoded weights: the float bar (LONG_PROMPT).
ACTIVATION_TOLERANCE = {"q8_0": 4e-2, "q4_0": 4e-2, "q4_1": 4e-2, "q5_0": 4e-2, "q5_1": 4e-2,
                        "q4_k": 6e-2, "q5_k": 6e-2, "q6_k": 6e-2}
SAME_WEIGHTS_TOLERANCE = {"f32": TOLERANCE, "f16": TOLERANCE, "bf16": TOLERANCE,
                          **ACTIVATION_TOLERANCE}
LONG_PROMPT = 80  # > 64 rows: the prefill path, exact up to f32 arithmetic for every type


@pytest.fixture(scope="module", params=[(c, a, t) for c, a in CHECKPOINTS for t in TYPES],
                ids=[f"{c}-{t}" for c, _ in CHECKPOINTS for t in TYPES])
def converted(request, tmp_path_factory):
    checkpoint, arch, outtype = request.param
    model_dir = os.path.join(MODELS, checkpoint)
    path = convert(model_dir, str(tmp_path_factory.mktemp("gguf") / f"{checkpoint}.gguf"), outtype)
    return dict(path=path, model_dir=model_dir, arch=arch, outtype=outtype,
                model=ssmkit.Model.load(path), expected=expected(checkpoint),
                state=dequantized_state_dict(path, arch))


def check_config(converted, keys=("arch", "d_model", "n_layer", "vocab_size", "d_inner",
                                   "d_state", "d_conv")):
    """The config read from the file's metadata has the checkpoint's values of `keys`."""
    original = ssmkit.Model.load(converted["model_dir"]).config
    got = converted["model"].config
    for key in keys:
        assert got[key] == original[key], key
    assert converted["model"].path == converted["path"]


def check_tokenizer(converted):
    """The tokenizer from tokenizer.ggml.* encodes and decodes the ASCII prompts (no NFC in
    GGUF) as the fixture records."""
    tokenizer = converted["model"].tokenizer
    for text, e in zip(PROMPT_TEXT[:3], converted["expected"]):
        assert tokenizer.encode(text) == list(e["ids"]), text
        assert tokenizer.decode(list(e["ids"])) == text


def check_logits(converted, **config_changes):
    """Every prefill position and three decode steps per prompt against transformers on the
    file's dequantized weights (converted["state"]), its config changed as given; returns the
    largest relative error seen."""
    session = converted["model"].session()
    tol = SAME_WEIGHTS_TOLERANCE[converted["outtype"]]
    worst = 0.0
    for e in converted["expected"]:
        ids = list(e["ids"]) + list(e["greedy"][:3])
        want = transformers_logits(converted["model_dir"], converted["state"], ids,
                                   **config_changes)
        got = session.prefill(ids, all_logits=True)[0]
        assert_close(got, want, tol, f"{converted['outtype']} prefill")
        worst = max(worst, rel_err(got, want))
        logits = session.prefill(ids[:len(e["ids"])])
        for j in range(3):
            assert_close(logits[0], want[len(e["ids"]) - 1 + j], tol, f"decode step {j}")
            logits = session.decode(int(ids[len(e["ids"]) + j]))
    return worst


def test_config_matches_the_checkpoint(converted):
    check_config(converted)


def test_tokenizer_from_metadata(converted):
    check_tokenizer(converted)


def test_logits_against_transformers_on_the_same_weights(converted):
    check_logits(converted)


def test_long_prompt_is_exact_on_the_files_weights(converted):
    """Every tensor as the file stores it, decoded exactly: a long prefill (f32 activations)
    matches transformers on gguf-py's decoding of the file to the float bar."""
    ids = [int(i) for i in np.random.default_rng(3).integers(2, 300, LONG_PROMPT)]
    want = transformers_logits(converted["model_dir"], converted["state"], ids)
    got = converted["model"].session().prefill(ids, all_logits=True)[0]
    assert_close(got, want, TOLERANCE, f"{converted['outtype']} {LONG_PROMPT}-token prefill")


def test_error_against_float32_is_the_files_own(converted):
    """Against transformers on the original weights: no worse than the file's rounding of the
    weights (transformers on the dequantized ones) plus the engine's own margin."""
    session = converted["model"].session()
    tol = SAME_WEIGHTS_TOLERANCE[converted["outtype"]]
    for e in converted["expected"]:
        original = e["prefill"]
        rounded = transformers_logits(converted["model_dir"], converted["state"], e["ids"])
        got = session.prefill(list(e["ids"]), all_logits=True)[0]
        assert rel_err(got, original) <= rel_err(rounded, original) + tol


def test_matrices_keep_the_files_type(converted):
    """Matrices are read as stored (not widened at load): the projections' dtype is the file's
    (Mamba-1's dt_proj, 2 columns, is not a whole block: the converter writes it f16)."""
    want = {"f32": {"f32"}, "f16": {"f16"}, "bf16": {"bf16"}, "q8_0": {"q8_0", "mixed"}}
    assert converted["model"].weight_dtype in want[converted["outtype"]]


# ssmkit quantize: every type on a model whose rows are whole K-quant blocks (d_model 256,
# d_inner 512), made with transformers at its own initialisation (quantize_checkpoints.py).
QUANT_TYPES = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "f16", "bf16"]


@pytest.fixture(scope="module", params=["mamba", "mamba2"])
def wide_checkpoint(request, tmp_path_factory):
    directory = make_wide(request.param, tmp_path_factory.mktemp(request.param))
    return dict(dir=directory, arch=request.param)


@pytest.mark.parametrize("qtype", QUANT_TYPES)
def test_quantize_every_type(wide_checkpoint, qtype, tmp_path):
    out = str(tmp_path / f"{qtype}.gguf")
    report = run_quantize(wide_checkpoint["dir"], out, qtype)
    # Mamba-1's dt_proj has rows of dt_rank = 16 elements, not a block: f16 in each layer.
    fallback = 2 if wide_checkpoint["arch"] == "mamba" and qtype.startswith("q") else 0
    assert f" {fallback} fallen back" in report, report
    model = ssmkit.Model.load(out)
    original = ssmkit.Model.load(wide_checkpoint["dir"])
    ids = [5, 99, 300, 17, 256, 3, 41, 77, 128, 9]
    # The bytes llama.cpp's decoder reads from our file, run by transformers.
    state = dequantized_state_dict(out, wide_checkpoint["arch"])
    rounded = transformers_logits(wide_checkpoint["dir"], state, ids)
    got = model.session().prefill(ids, all_logits=True)[0]
    tol = SAME_WEIGHTS_TOLERANCE[qtype]
    assert_close(got, rounded, tol, f"{qtype}: against transformers on the file's weights")
    long_ids = [int(i) for i in np.random.default_rng(5).integers(2, 500, LONG_PROMPT)]
    assert_close(model.session().prefill(long_ids, all_logits=True)[0],
                 transformers_logits(wide_checkpoint["dir"], state, long_ids), TOLERANCE,
                 f"{qtype}: {LONG_PROMPT}-token prefill")
    want = original.session().prefill(ids, all_logits=True)[0]
    own = rel_err(rounded, want)
    assert rel_err(got, want) <= own + tol, f"{qtype}: error {rel_err(got, want):.3g} vs {own:.3g}"
    # Fewer bits, more error: the file's own rounding is ordered by its bits per weight
    # (measured q4_1 0.25-0.28, q5_0 0.14-0.15, q5_1 0.12-0.15 on the two models).
    assert own < {"q4_0": 0.5, "q4_1": 0.5, "q4_k": 0.3, "q5_0": 0.2, "q5_1": 0.2, "q5_k": 0.15,
                  "q6_k": 0.08, "q8_0": 0.02, "f16": 2e-3, "bf16": 2e-2}[qtype], own


def test_quantize_a_gguf_again(wide_checkpoint, tmp_path):
    """A GGUF input (q8_0) re-quantized to q4_k keeps the tokenizer keys as they were."""
    first = str(tmp_path / "q8.gguf")
    run_quantize(wide_checkpoint["dir"], first, "q8_0")
    second = str(tmp_path / "q4k.gguf")
    run_quantize(first, second, "q4_k")
    a, b = ssmkit.Model.load(first), ssmkit.Model.load(second)
    assert a.tokenizer.encode("The quick brown fox") == b.tokenizer.encode("The quick brown fox")
    assert b.weight_dtype in ("q4_k", "mixed")


def test_quantize_refuses_bad_arguments(tmp_path):
    import subprocess
    fixture = os.path.join(MODELS, "mamba1-hf")
    bad_type = subprocess.run([CLI, "quantize", "--type", "q3_k", fixture, str(tmp_path / "x")],
                              capture_output=True, text=True)
    assert bad_type.returncode != 0 and "--type q3_k: expected" in bad_type.stderr
    # A family llama.cpp's converter has no architecture for (test_quantize_hybrid.py has the
    # others refused).
    zamba2 = subprocess.run([CLI, "quantize", "--type", "q8_0", os.path.join(MODELS, "zamba2"),
                             str(tmp_path / "y")], capture_output=True, text=True)
    assert zamba2.returncode != 0 and "Zamba2ForCausalLM: quantize writes" in zamba2.stderr
    assert not os.path.exists(tmp_path / "y")
