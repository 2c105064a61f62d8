"""GGUF files of the hybrid fixtures (scripts/hybrid_fixtures.py) written by llama.cpp's converter
(gguf_files.py) in f32, bf16 and q8_0, loaded by ssmkit.Model.load(path.gguf):

- the config read from the metadata has the block list (and sizes) of the checkpoint's;
- the tokenizer built from tokenizer.ggml.* encodes the prompts to the ids the fixture records;
- logits at every prefill position and over decode steps against transformers run on the
  file's own numbers (its tensors dequantized by gguf-py, every conversion step undone in
  gguf_files.hybrid_state_dict, independently of the C++ loader).

What the converter cannot express is the file's model, not the checkpoint's: it writes
granitehybrid files of GraniteMoeHybridForCausalLM with rope off (the published Granite-4.0-H
models have none), so transformers runs the MoE fixture with position_embedding_type "nope";
it multiplies Falcon-H1's muP multipliers into the weights without recording them, so
transformers runs the falcon_h1 fixture with every multiplier 1. The nemotron_h fixture is
converted from the config its published dense checkpoints state, the nemotron_h-moe and
nemotron_h-moe-latent fixtures (nemotron_h_moe files, the second with moe_latent_size and its
ffn_latent_down / ffn_latent_up projections) from their own configs with the keys the published
ones add (gguf_files.converter_input).
Fixtures the converter refuses are not here: falcon_h1-norm (mamba_proj_bias: it scales the
in_proj bias as a matrix and fails), zamba2 (no Zamba2 converter).

Dimension legend: L prompt length, V vocab."""
import json
import os

import numpy as np
import pytest

import ssmkit
from checks import assert_close
from gguf_files import (FALCON_H1_UNIT_MULTIPLIERS, convert, converter_input, hybrid_state_dict,
                        sentencepiece_vocabulary, transformers_logits)
from test_gguf import SAME_WEIGHTS_TOLERANCE, check_config, check_logits, check_tokenizer
from test_model import MODELS, TOLERANCE, expected

pytest.importorskip("transformers")

# (fixture, the config changes that make transformers run the model the file stands for)
CHECKPOINTS = [
    ("granitemoehybrid-moe", {"position_embedding_type": "nope"}),
    ("granitemoehybrid-dense", {}),
    ("bamba", {}),
    ("falcon_h1", FALCON_H1_UNIT_MULTIPLIERS),
    ("nemotron_h", {}),
    ("nemotron_h-moe", {}),
    ("nemotron_h-moe-latent", {}),
    ("jamba", {}),
]
TYPES = ["f32", "bf16", "q8_0"]


@pytest.fixture(scope="module", params=[(c, t) for c, _ in CHECKPOINTS for t in TYPES],
                ids=[f"{c}-{t}" for c, _ in CHECKPOINTS for t in TYPES])
def converted(request, tmp_path_factory):
    checkpoint, outtype = request.param
    model_dir = os.path.join(MODELS, checkpoint)
    tmp = tmp_path_factory.mktemp("gguf")
    source = converter_input(model_dir, str(tmp / "checkpoint"))
    path = convert(source, str(tmp / f"{checkpoint}.gguf"), outtype, pre="llama-bpe")
    if checkpoint == "jamba":
        path = sentencepiece_vocabulary(path, model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    return dict(path=path, model_dir=model_dir, outtype=outtype, name=checkpoint,
                changes=dict(CHECKPOINTS)[checkpoint], model=ssmkit.Model.load(path),
                expected=expected(checkpoint), state=hybrid_state_dict(path, config))


def test_config_matches_the_checkpoint(converted):
    check_config(converted, ("family", "arch", "blocks", "d_model", "n_layer", "vocab_size",
                             "d_inner", "d_state", "d_conv"))


def test_tokenizer_from_metadata(converted):
    check_tokenizer(converted)


def test_logits_against_transformers_on_the_same_weights(converted):
    worst = check_logits(converted, **converted["changes"])
    print(f"{converted['name']} {converted['outtype']}: relative logit error {worst:.2e}")


def test_the_comparison_sees_q_rows_left_permuted(converted):
    """The comparison above can fail: transformers with one Q matrix left in the converter's row
    order differs from the engine by far more than the tolerance. Rope models only: without
    rope (the Granite fixtures) the order only relabels dims, and with their near-uniform
    attention one Q alone moves the logits by ~1e-4."""
    if converted["name"] != "bamba":
        pytest.skip("no rope, or Q and K not permuted by the converter")
    state = dict(converted["state"])
    q = [k for k in state if k.endswith("self_attn.q_proj.weight")]
    with open(os.path.join(converted["model_dir"], "config.json")) as f:
        heads = json.load(f)["num_attention_heads"]
    w = state[q[0]]
    e = w.shape[0] // heads
    state[q[0]] = w.reshape(heads, 2, e // 2, -1).swapaxes(1, 2).reshape(w.shape)
    ids = list(converted["expected"][2]["ids"])
    want = transformers_logits(converted["model_dir"], state, ids, **converted["changes"])
    got = converted["model"].session().prefill(ids, all_logits=True)[0]
    assert np.abs(got - want).max() > 10 * SAME_WEIGHTS_TOLERANCE["f32"] * np.abs(want).max()


@pytest.fixture(scope="module")
def f32_files(tmp_path_factory):
    """Each checkpoint's f32 file, converted on first use."""
    files = {}

    def get(checkpoint):
        if checkpoint not in files:
            tmp = tmp_path_factory.mktemp(f"bad-{checkpoint}")
            source = converter_input(os.path.join(MODELS, checkpoint), str(tmp / "checkpoint"))
            files[checkpoint] = convert(source, str(tmp / f"{checkpoint}.gguf"), "f32",
                                        pre="llama-bpe")
        return files[checkpoint]
    return get


@pytest.fixture(scope="module")
def bamba_f32(f32_files):
    return f32_files("bamba")


def edited(path, tmp_path, edit):
    """A copy of the file with metadata values changed in place (gguf-py's reader on a
    writable map): edit(fields) sets field.parts[...] entries."""
    import shutil
    from gguf_files import gguf_py
    out = str(tmp_path / "edited.gguf")
    shutil.copy(path, out)
    reader = gguf_py().GGUFReader(out, "r+")
    edit(reader.fields)
    reader.data.flush()
    del reader
    return out


def set_array_entry(field, i, value):
    field.parts[field.data[i]][0] = value


# (checkpoint, key, entry, value, the error it must give): metadata that states no model.
BAD_METADATA = [
    # One attention layer's key-value heads disagreeing with another's.
    ("bamba", "granitehybrid.attention.head_count_kv", 0, 3,
     r"'granitehybrid\.attention\.head_count_kv' is 3 and 2|2 and 3"),
    ("bamba", "granitehybrid.rope.dimension_count", 0, 3,
     r"'granitehybrid\.rope\.dimension_count' is 3, expected an even"),
    ("jamba", "jamba.attention.head_count_kv", 3, 3,
     r"'jamba\.attention\.head_count_kv' is 2 and 3, expected the same"),
    ("jamba", "jamba.expert_used_count", 0, 5, r"experts per token 5 must be in \[1, 4\]"),
    # The nemotron_h-moe fixture's 8 experts in 4 groups, 2 kept: no kept group, and more
    # experts per token than the kept groups hold.
    ("nemotron_h-moe", "nemotron_h_moe.expert_group_used_count", 0, 0,
     r"'nemotron_h_moe\.expert_group_used_count' is 0, expected in \[1, expert_group_count 4\]"),
    ("nemotron_h-moe", "nemotron_h_moe.expert_used_count", 0, 5,
     r"'nemotron_h_moe\.expert_used_count' is 5, expected at most the experts of the "
     r"expert_group_used_count kept groups \(4\)"),
    # The latent fixture's file says no latent width while it holds the projections.
    ("nemotron_h-moe-latent", "nemotron_h_moe.moe_latent_size", 0, 0,
     r"'nemotron_h_moe\.moe_latent_size' is 0, expected the latent width \(the file has "
     r"ffn_latent_down tensors\)"),
]


@pytest.mark.parametrize("checkpoint,key,entry,value,message", BAD_METADATA,
                         ids=[f"{c}-{k.split('.', 1)[1]}" for c, k, *_ in BAD_METADATA])
def test_bad_metadata_is_named(f32_files, checkpoint, key, entry, value, message, tmp_path):
    def edit(fields):
        set_array_entry(fields[key], entry, value)
    with pytest.raises(ssmkit.InvalidArgumentError, match=message):
        ssmkit.Model.load(edited(f32_files(checkpoint), tmp_path, edit))


def with_key(path, tmp_path, key, value):
    """A copy of the file with one more uint32 metadata key: gguf-py's writer given every key,
    value and tensor its reader finds, as they are."""
    from gguf_files import gguf_py
    gguf = gguf_py()
    reader = gguf.GGUFReader(path)
    out = str(tmp_path / "with-key.gguf")
    writer = gguf.GGUFWriter(out, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header's, and the one the writer writes itself
        array = field.types[0] == gguf.GGUFValueType.ARRAY
        writer.add_key_value(name, field.contents(), field.types[0],
                             sub_type=field.types[-1] if array else None)
    writer.add_uint32(key, value)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_multi_token_prediction_is_refused_by_name(f32_files, tmp_path):
    # What the converter writes for a checkpoint with an MTP head (num_nextn_predict_layers)
    # unless given --no-mtp: the engine does not run that block.
    path = with_key(f32_files("nemotron_h-moe-latent"), tmp_path,
                    "nemotron_h_moe.nextn_predict_layers", 1)
    with pytest.raises(ssmkit.UnsupportedError,
                       match=r"'nemotron_h_moe\.nextn_predict_layers' is 1: the "
                             r"multi-token-prediction block is not supported"):
        ssmkit.Model.load(path)


def test_an_architecture_not_read_is_refused_by_name(bamba_f32, tmp_path):
    # The value and the keys' prefix renamed alike (same length).
    with open(bamba_f32, "rb") as f:
        data = f.read().replace(b"granitehybrid", b"granitehybriX")
    path = tmp_path / "other.gguf"
    path.write_bytes(data)
    with pytest.raises(ssmkit.UnsupportedError,
                       match=r"general\.architecture 'granitehybriX': this version reads .*"
                             r"'granitehybrid'"):
        ssmkit.Model.load(str(path))


def test_falcon_h1_file_is_the_checkpoint(converted):
    """The multipliers the converter folds into a falcon-h1 file's weights reproduce the
    checkpoint's model: the f32 file's logits against transformers' on the original checkpoint
    (the fixture's recorded logits, every muP multiplier as its config states), and against the
    file's weights run with those multipliers a second time, which must be far off."""
    if converted["name"] != "falcon_h1" or converted["outtype"] != "f32":
        pytest.skip("falcon-h1 f32 only")
    session = converted["model"].session()
    for e in converted["expected"]:
        got = session.prefill(list(e["ids"]), all_logits=True)[0]
        assert_close(got, e["prefill"], TOLERANCE, "falcon-h1 file against the checkpoint")
    ids = list(converted["expected"][0]["ids"])
    twice = transformers_logits(converted["model_dir"], converted["state"], ids)
    got = session.prefill(ids, all_logits=True)[0]
    assert np.abs(got - twice).max() > 10 * TOLERANCE * np.abs(twice).max()
