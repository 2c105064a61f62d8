"""`ssmkit quantize` on the hybrid families llama.cpp's converter writes: granitehybrid
(GraniteMoeHybridForCausalLM dense and MoE, BambaForCausalLM), falcon-h1, nemotron_h /
nemotron_h_moe (NemotronHForCausalLM without / with MoE layers, with and without their latent
projections) and jamba.

- The hybrid fixtures written in f32, q8_0 and q4_k (their matrices are too narrow for K-quant
  blocks: q4_k falls back to q5_0 and f16 as llama-quantize's does): read with llama.cpp's
  gguf-py, the file has the metadata keys and values and the tensor names and shapes of the
  converter's own file for the same checkpoint (gguf_files.convert), but for the keys where
  ours states the checkpoint's model and the converter's does not (DEVIATIONS), general.name and
  general.file_type; in f32 every tensor holds the converter's numbers (the multipliers folded,
  Q / K rows interleaved, gate / up split, experts stacked alike); each tensor's type is
  llama-quantize's choice; the engine's logits on the file against transformers on its
  dequantized weights, as test_gguf_hybrid.py checks the converter's files.
- The converter's own f32 files re-quantized (a GGUF input): its metadata kept as it is.
- Checkpoints of each family at d_model 256 (quantize_checkpoints.py), whose matrices are whole
  K-quant blocks, in q8_0, q4_k and q6_k: nothing falls back, logits against transformers on
  the file's weights, and against the original weights no worse than the file's own rounding.
- Zamba2 (no writer here), what a falcon-h1 file cannot state and a checkpoint missing an
  expert's tensor are refused.
- With SSMKIT_LLAMA_CPP_BIN naming a llama.cpp build's bin/ directory (libllama.so): llama.cpp
  itself loads the wide checkpoints' files (the Mamba ones too) and its logits match the
  engine's on the same file (llama_cpp_logits.py); skipped otherwise.

Dimension legend: L prompt length, V vocab."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ssmkit
from checks import assert_close, rel_err
from gguf_files import (FALCON_H1_UNIT_MULTIPLIERS, convert, converter_input,
                        dequantized_state_dict, gguf_py, hybrid_state_dict,
                        sentencepiece_metadata, transformers_logits)
from quantize_checkpoints import CLI, WIDE, make_wide, run_quantize
from test_gguf import (LONG_PROMPT, SAME_WEIGHTS_TOLERANCE, check_config, check_logits,
                       check_tokenizer)
from test_model import MODELS, TOLERANCE, expected

pytest.importorskip("transformers")

# (fixture, the config changes that make transformers run the model the file stands for: the
# falcon-h1 multipliers are folded into the weights)
CHECKPOINTS = [
    ("granitemoehybrid-moe", {}),
    ("granitemoehybrid-dense", {}),
    ("bamba", {}),
    ("falcon_h1", FALCON_H1_UNIT_MULTIPLIERS),
    ("nemotron_h", {}),
    ("nemotron_h-moe", {}),
    ("nemotron_h-moe-latent", {}),
    ("jamba", {}),
]
TYPES = ["f32", "q8_0", "q4_k"]
# Keys where our file states the checkpoint's model and the converter's file does not
# (docs/gguf.md, "Writing"): the MoE fixture has rope (the converter turns it off for every
# GraniteMoeHybrid); the dense fixture's MLP is shared_intermediate_size wide, its
# num_experts_per_tok is transformers' default 2 with no experts (llama.cpp asserts on it).
# The jamba fixture has a tokenizer.json and no tokenizer.model: ours states its tokenizer as a
# conversion from a SentencePiece model does (deviations(), gguf_files.sentencepiece_metadata);
# the converter's scores every piece alike, which llama.cpp tokenizes otherwise.
DEVIATIONS = {
    "granitemoehybrid-moe": {"granitehybrid.rope.scaling.finetuned": True,
                             "granitehybrid.context_length": 2048},
    "granitemoehybrid-dense": {"granitehybrid.feed_forward_length": 48,
                               "granitehybrid.expert_used_count": 0},
}
# llama.cpp's llama_ftype for each --type (general.file_type).
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8,
             "q5_1": 9, "q4_k": 14, "q5_k": 16, "q6_k": 18, "q4_k_s": 14, "q4_k_m": 15,
             "q5_k_s": 16, "q5_k_m": 17}
BLOCK = {"q8_0": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32, "q4_k": 256, "q5_k": 256,
         "q6_k": 256}
FALLBACK = {"q4_k": "Q5_0", "q5_k": "Q5_1", "q6_k": "Q8_0"}  # for rows of 32-multiples


def read_gguf(path):
    """(metadata {key: value}, tensors {name: (GGML type name, shape, float32 values)}), shapes
    outermost first, as gguf-py reads the file."""
    gguf = gguf_py()
    reader = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: (t.tensor_type.name, tuple(int(n) for n in reversed(t.shape)),
                        gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
               for t in reader.tensors}
    return meta, tensors


def expected_type(name, shape, qtype):
    """llama-quantize's type for a tensor: a matrix (a "...weight" of 2 or 3 dims but the norms,
    the conv and the router) in `qtype` when its rows are whole blocks of it, else the
    fallback; everything else f32."""
    matrix = (len(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
              and "ssm_conv1d" not in name and "ffn_gate_inp" not in name)
    if not matrix:
        return "F32"
    if qtype not in BLOCK or shape[-1] % BLOCK[qtype] == 0:
        return qtype.upper()
    return FALLBACK.get(qtype, "Q8_0") if shape[-1] % 32 == 0 else "F16"


@pytest.fixture(scope="module")
def converter_f32(tmp_path_factory):
    """The converter's f32 file of a fixture (converted once per fixture)."""
    files = {}

    def get(checkpoint):
        if checkpoint not in files:
            tmp = tmp_path_factory.mktemp("converter")
            source = converter_input(os.path.join(MODELS, checkpoint), str(tmp / "checkpoint"))
            files[checkpoint] = convert(source, str(tmp / f"{checkpoint}.gguf"), "f32",
                                        pre="llama-bpe")
        return files[checkpoint]
    return get


def fixture_config(checkpoint):
    with open(os.path.join(MODELS, checkpoint, "config.json")) as f:
        return json.load(f)


def deviations(checkpoint, theirs):
    """The keys where our file of `checkpoint` differs from the converter's (metadata
    `theirs`), with our values."""
    if checkpoint == "jamba":
        config = fixture_config(checkpoint)
        return sentencepiece_metadata(theirs, os.path.join(MODELS, checkpoint),
                                      config["vocab_size"])
    return DEVIATIONS.get(checkpoint, {})


@pytest.fixture(scope="module", params=[(c, t) for c, _ in CHECKPOINTS for t in TYPES],
                ids=[f"{c}-{t}" for c, _ in CHECKPOINTS for t in TYPES])
def written(request, tmp_path_factory):
    checkpoint, qtype = request.param
    model_dir = os.path.join(MODELS, checkpoint)
    path = str(tmp_path_factory.mktemp("quantized") / f"{checkpoint}-{qtype}.gguf")
    run_quantize(model_dir, path, qtype)
    return dict(path=path, model_dir=model_dir, outtype=qtype, name=checkpoint,
                changes=dict(CHECKPOINTS)[checkpoint], model=ssmkit.Model.load(path),
                expected=expected(checkpoint),
                state=hybrid_state_dict(path, fixture_config(checkpoint)))


def test_metadata_and_tensors_are_the_converters(written, converter_f32):
    ours, our_tensors = read_gguf(written["path"])
    theirs, their_tensors = read_gguf(converter_f32(written["name"]))
    assert ours.pop("general.file_type") == FILE_TYPE[written["outtype"]]
    for meta in (ours, theirs):
        for key in ("general.name", "general.file_type"):
            meta.pop(key, None)
    want = {**theirs, **deviations(written["name"], theirs)}
    assert sorted(ours) == sorted(want)
    for key, value in want.items():
        assert ours[key] == value, key
    assert {n: t[1] for n, t in our_tensors.items()} == {n: t[1] for n, t in their_tensors.items()}


def test_tensor_types_are_llama_quantizes(written):
    _, tensors = read_gguf(written["path"])
    for name, (ggml_type, shape, _) in tensors.items():
        assert ggml_type == expected_type(name, shape, written["outtype"]), name


def test_f32_file_holds_the_converters_numbers(written, converter_f32):
    """The same products, splits and row orders as the converter's: equal up to an ulp of exp
    (A = -exp(A_log): torch's exp and the C library's)."""
    if written["outtype"] != "f32":
        pytest.skip("f32 only")
    _, ours = read_gguf(written["path"])
    _, theirs = read_gguf(converter_f32(written["name"]))
    for name, (_, _, values) in ours.items():
        np.testing.assert_allclose(values, theirs[name][2], rtol=3e-7, atol=0, err_msg=name)


def test_config_matches_the_checkpoint(written):
    check_config(written, ("family", "arch", "blocks", "d_model", "n_layer", "vocab_size",
                           "d_inner", "d_state", "d_conv"))


def test_tokenizer_from_metadata(written):
    check_tokenizer(written)


def test_logits_against_transformers_on_the_same_weights(written):
    worst = check_logits(written, **written["changes"])
    print(f"{written['name']} {written['outtype']}: relative logit error {worst:.2e}")


@pytest.mark.parametrize("checkpoint", [c for c, _ in CHECKPOINTS])
def test_the_converters_file_requantized(checkpoint, converter_f32, tmp_path):
    """A GGUF input keeps its metadata as it is (its own file type aside) and its tensors'
    names and shapes; the engine on the result against transformers on its weights."""
    source = converter_f32(checkpoint)
    path = str(tmp_path / "q8_0.gguf")
    run_quantize(source, path, "q8_0")
    ours, our_tensors = read_gguf(path)
    theirs, their_tensors = read_gguf(source)
    assert ours.pop("general.file_type") == FILE_TYPE["q8_0"]
    theirs.pop("general.file_type")
    assert ours == theirs
    assert {n: t[1] for n, t in our_tensors.items()} == {n: t[1] for n, t in their_tensors.items()}
    changes = dict(CHECKPOINTS)[checkpoint]
    if checkpoint == "granitemoehybrid-moe":  # the converter's file has no rope
        changes = {"position_embedding_type": "nope"}
    check_logits(dict(path=path, model_dir=os.path.join(MODELS, checkpoint), outtype="q8_0",
                      model=ssmkit.Model.load(path), expected=expected(checkpoint),
                      state=hybrid_state_dict(path, fixture_config(checkpoint))), **changes)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """The d_model 256 checkpoint of a family (quantize_checkpoints.WIDE), made once."""
    made = {}

    def get(family):
        if family not in made:
            made[family] = make_wide(family, tmp_path_factory.mktemp(family))
        return made[family]
    return get


def wide_changes(family):
    """The config changes for transformers on a wide checkpoint's file: falcon-h1's multipliers
    are folded, and its tied head written apart (scaled by its own multiplier; the deep one's is
    not tied)."""
    if family == "falcon_h1":
        return dict(FALCON_H1_UNIT_MULTIPLIERS, tie_word_embeddings=False)
    return {}


HYBRIDS = [f for f in WIDE if f not in ("mamba", "mamba2")]


def check_wide_logits(family, directory, out, qtype, tol=None):
    """The engine's logits on the file `out` written from the checkpoint `directory` in `qtype`:
    against transformers on the file's own (dequantized) weights, within `tol` (default
    SAME_WEIGHTS_TOLERANCE[qtype]: a short prompt's activations are rounded to 8 bits) and, over
    a prompt long enough for the prefill path's f32 activations, within the float bar; against
    the original weights no worse than the file's own rounding. Returns that rounding's relative
    error."""
    model = ssmkit.Model.load(out)
    if family in ("mamba", "mamba2"):
        state = dequantized_state_dict(out, family)
    else:
        with open(os.path.join(directory, "config.json")) as f:
            state = hybrid_state_dict(out, json.load(f))
    ids = [5, 99, 300, 17, 256, 3, 41, 77, 128, 9]
    rounded = transformers_logits(directory, state, ids, **wide_changes(family))
    got = model.session().prefill(ids, all_logits=True)[0]
    tol = SAME_WEIGHTS_TOLERANCE[qtype] if tol is None else tol
    assert_close(got, rounded, tol, f"{family} {qtype}: against transformers on the file's weights")
    # The experts of a MoE model each see a few of the long prompt's rows: the 8-bit path.
    long_tol = tol if family in ("granitemoehybrid-moe", "nemotron_h-moe", "jamba") else TOLERANCE
    long_ids = [int(i) for i in np.random.default_rng(5).integers(2, 500, LONG_PROMPT)]
    assert_close(model.session().prefill(long_ids, all_logits=True)[0],
                 transformers_logits(directory, state, long_ids, **wide_changes(family)),
                 long_tol, f"{family} {qtype}: {LONG_PROMPT}-token prefill")
    want = ssmkit.Model.load(directory).session().prefill(ids, all_logits=True)[0]
    own = rel_err(rounded, want)
    assert rel_err(got, want) <= own + tol, f"{qtype}: error {rel_err(got, want):.3g} vs {own:.3g}"
    return own


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k", "q6_k"])
@pytest.mark.parametrize("family", HYBRIDS)
def test_wide_checkpoint_every_matrix_quantized(family, qtype, wide, tmp_path):
    directory = wide(family)
    out = str(tmp_path / f"{qtype}.gguf")
    assert " 0 fallen back" in run_quantize(directory, out, qtype)
    _, tensors = read_gguf(out)
    for name, (ggml_type, shape, _) in tensors.items():
        assert ggml_type == expected_type(name, shape, qtype) in (qtype.upper(), "F32"), name
    check_wide_logits(family, directory, out, qtype)


def edited_fixture(checkpoint, tmp_path, config_changes=None, drop=()):
    """A copy of a fixture's directory with keys set in its config.json and the tensors named
    in `drop` left out of its model.safetensors (the other files linked)."""
    from safetensors.numpy import load_file, save_file
    source = os.path.join(MODELS, checkpoint)
    copy = tmp_path / checkpoint
    copy.mkdir()
    for f in os.listdir(source):
        if f not in ("config.json", "model.safetensors"):
            os.symlink(os.path.join(os.path.abspath(source), f), copy / f)
    (copy / "config.json").write_text(
        json.dumps({**fixture_config(checkpoint), **(config_changes or {})}))
    tensors = load_file(os.path.join(source, "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if k not in drop}, str(copy / "model.safetensors"))
    return str(copy)


@pytest.mark.parametrize("checkpoint,config_changes,drop,named", [
    ("zamba2", {}, (), "Zamba2ForCausalLM: quantize writes"),
    ("falcon_h1-norm", {}, (), "(mamba_proj_bias), which llama.cpp's falcon-h1 does not read"),
    # The per-expert tensors stack only when every expert is there.
    ("nemotron_h-moe", {}, ("backbone.layers.3.mixer.experts.5.up_proj.weight",),
     "'backbone.layers.3.mixer.experts.up_proj' has tensors of 7 experts, expected 8"),
])
def test_refused_by_name(checkpoint, config_changes, drop, named, tmp_path):
    source = os.path.join(MODELS, checkpoint)
    if config_changes or drop:
        source = edited_fixture(checkpoint, tmp_path, config_changes, drop)
    out = tmp_path / "x.gguf"
    result = subprocess.run([CLI, "quantize", "--type", "q8_0", source, str(out)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and named in result.stderr, result.stderr
    assert not out.exists()


# ---------------------------------------------------------------- llama.cpp itself (opt-in)

LLAMA_CPP_BIN = os.environ.get("SSMKIT_LLAMA_CPP_BIN", "")
# llama.cpp against the engine on the same file (relative logit error): in f32 its f16 KV cache
# (measured at most 6.1e-4, on Jamba), for quantized matrices both engines' rounding of the
# activations to 8 bits (measured at most 2.5e-2 at q8_0 on Jamba, 3.8e-2 at q4_k on Mamba-1).
LLAMA_CPP_TOLERANCE = {"f32": 1e-3, "q8_0": 4e-2, "q4_k": 6e-2}
# Bamba's rope covers half of each head: llama.cpp rotates the stored pairs (2j, 2j + 1) of the
# first rope.dimension_count rows of a head, which in the converter's order (Q and K rows
# interleaved over the whole head, written alike here) are the checkpoint's rows (j, E/2 + j),
# not the (j, R/2 + j) transformers rotates. llama.cpp's Bamba is off by ~1e-2 on any file
# (the converter's too; with the whole head rotated it agrees to 7e-5); the engine reads the
# file as transformers runs the checkpoint (measured 1.2e-2 f32, 1.8e-2 q8_0, 2.2e-2 q4_k).
LLAMA_CPP_BAMBA_TOLERANCE = 3e-2


@pytest.mark.skipif(not os.path.isfile(os.path.join(LLAMA_CPP_BIN, "libllama.so")),
                    reason="SSMKIT_LLAMA_CPP_BIN does not name a llama.cpp build's bin/ "
                           "directory with libllama.so")
@pytest.mark.parametrize("qtype", ["f32", "q8_0", "q4_k"])
@pytest.mark.parametrize("family", WIDE)
def test_llama_cpp_runs_the_file(family, qtype, wide, tmp_path):
    """llama.cpp loads the file and its logits, over a prefill and at every decode position,
    are finite and the engine's on the same file."""
    out = str(tmp_path / f"{family}-{qtype}.gguf")
    run_quantize(wide(family), out, qtype)
    ids = [5, 99, 300, 17, 256, 3, 41, 77, 128, 9]
    logits = str(tmp_path / "llama.npz")
    result = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "llama_cpp_logits.py"),
         LLAMA_CPP_BIN, out, logits, *map(str, ids)],
        capture_output=True, text=True, env=dict(os.environ, GGML_NO_BACKTRACE="1"))
    assert result.returncode == 0, f"llama.cpp on {family} {qtype}: {result.stderr[-2000:]}"
    theirs = np.load(logits)
    ours = ssmkit.Model.load(out).session().prefill(ids, all_logits=True)[0]
    assert np.isfinite(theirs["decode"]).all() and np.isfinite(theirs["prefill"]).all()
    assert theirs["decode"].shape == ours.shape
    decode_err = rel_err(theirs["decode"], ours)
    prefill_err = rel_err(theirs["prefill"], ours[-1])
    print(f"llama.cpp {family} {qtype}: decode {decode_err:.2e}, prefill {prefill_err:.2e}")
    tol = max(LLAMA_CPP_TOLERANCE[qtype], LLAMA_CPP_BAMBA_TOLERANCE if family == "bamba" else 0)
    assert decode_err < tol and prefill_err < tol, (decode_err, prefill_err)
