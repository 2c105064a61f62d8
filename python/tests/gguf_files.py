"""GGUF files for the tests, written by the peer: llama.cpp's convert_hf_to_gguf.py (from the
llama-cpp-python source distribution, scripts/llama_cpp_converter.sh), and read back with its
gguf-py into the Hugging Face state dict the file stands for (dequantized to float32), so that
transformers can run the very numbers the file holds.

The converter names a byte-level BPE pre-tokenizer by hashing how the tokenizer splits a probe
text and refuses one it does not know; the fixtures' tokenizer is GPT-NeoX's byte-level one cut
down to 300 tokens, which llama.cpp knows as "gpt-2", so the tests tell it so."""
import functools
import json
import os
import runpy
import subprocess
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@functools.lru_cache(maxsize=None)
def converter():
    """The converter's path (downloaded and unpacked once)."""
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "llama_cpp_converter.sh"),
                          sys.executable], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def convert(model_dir, out_path, outtype, pre="gpt-2"):
    """convert_hf_to_gguf.py MODEL_DIR --outfile OUT --outtype TYPE, in a child process, the
    byte-level pre-tokenizer named `pre` ("gpt-2": GPT-NeoX's; "llama-bpe": the Split by the
    Llama-3 regex of the hybrid fixtures' tokenizer)."""
    code = ("import runpy, sys\n"
            "script, pre = sys.argv[1], sys.argv[2]\n"
            "sys.path.insert(0, script.rsplit('/', 1)[0])\n"
            "import conversion.base as base\n"
            "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre\n"
            "sys.argv = [script] + sys.argv[3:]\n"
            "runpy.run_path(script, run_name='__main__')\n")
    subprocess.run([sys.executable, "-c", code, converter(), pre, model_dir, "--outfile",
                    out_path, "--outtype", outtype], check=True, capture_output=True)
    return out_path


def gguf_py():
    """llama.cpp's gguf-py package, from beside the converter."""
    path = os.path.join(os.path.dirname(converter()), "gguf-py")
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf
    return gguf


# GGUF's per-layer names and the Hugging Face ones (llama.cpp's tensor_mapping, for the
# MambaForCausalLM / Mamba2ForCausalLM names only).
LAYER_NAMES = {
    "attn_norm.weight": "norm.weight", "ssm_in.weight": "mixer.in_proj.weight",
    "ssm_in.bias": "mixer.in_proj.bias", "ssm_conv1d.weight": "mixer.conv1d.weight",
    "ssm_conv1d.bias": "mixer.conv1d.bias", "ssm_x.weight": "mixer.x_proj.weight",
    "ssm_dt.weight": "mixer.dt_proj.weight", "ssm_a": "mixer.A_log", "ssm_d": "mixer.D",
    "ssm_norm.weight": "mixer.norm.weight", "ssm_out.weight": "mixer.out_proj.weight",
    "ssm_out.bias": "mixer.out_proj.bias",
}


def dequantized_state_dict(path, arch):
    """{Hugging Face name: float32 array} of the GGUF file at `path` (arch "mamba" or
    "mamba2"), every tensor dequantized with gguf-py and the converter's transformations undone
    (A = -exp(A_log) back to A_log, squeezed and reshaped tensors back to their shapes)."""
    gguf = gguf_py()
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        name = t.name
        if name == "token_embd.weight":
            out["backbone.embeddings.weight"] = values
            continue
        if name == "output_norm.weight":
            out["backbone.norm_f.weight"] = values
            continue
        if name == "output.weight":
            out["lm_head.weight"] = values
            continue
        _, layer, rest = name.split(".", 2)
        if arch == "mamba2" and rest == "ssm_dt.bias":
            hf = "mixer.dt_bias"
        elif rest == "ssm_dt.bias":
            hf = "mixer.dt_proj.bias"
        else:
            hf = LAYER_NAMES[rest]
        if rest == "ssm_a":
            values = np.log(-values.astype(np.float64)).astype(np.float32)
        if rest == "ssm_conv1d.weight":
            values = values[:, None, :]
        if arch == "mamba2" and rest in ("ssm_a", "ssm_d", "ssm_norm.weight"):
            values = values.reshape(-1)
        out[f"backbone.layers.{layer}.{hf}"] = values
    return out


def transformers_logits(model_dir, state_dict, ids, **config_changes):
    """transformers' logits (L, V) for one prompt, with the checkpoint's config (keys changed as
    given) and the given weights (float32)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(model_dir, **config_changes)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict.items()}
    if "lm_head.weight" not in tensors:  # tied
        embedding = [k for k in ("backbone.embeddings.weight", "model.embed_tokens.weight")
                     if k in tensors]
        tensors["lm_head.weight"] = tensors[embedding[0]]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].numpy()


# ------------------------------------------------------------------ the hybrid architectures

def converter_input(model_dir, out_dir):
    """A copy of a hybrid fixture's directory (the tensors and tokenizer linked) whose
    config.json says what the converter reads the way the published checkpoints say it, the
    model unchanged for transformers:
      - GraniteMoeHybrid's layer_types as the hub files spell them ("mamba" / "attention"): the
        converter looks for "attention" and would take transformers 5's "full_attention" layers
        for Mamba ones;
      - Bamba's attn_rotary_emb, the rotated dims per head its published configs state (head
        dim / 2, what transformers hard-codes): without it the converter writes the whole head;
      - Falcon-H1's head_dim, which its published configs state and the converter requires
        (transformers' default when absent: hidden_size / num_attention_heads);
      - Nemotron-H's config as the published checkpoints state it: num_hidden_layers
        (transformers 5 writes the pattern only), mamba_d_head (the converter checks d_inner
        against it, default 64), and a model_type transformers does not know, so that the
        converter reads config.json as it is, as it does for the hub checkpoints' remote-code
        configs, instead of transformers 5's NemotronHConfig.to_dict(), which puts the MoE
        defaults back; a dense one (no "E" block) without MoE keys, as the dense published
        checkpoints state it: the converter writes "nemotron_h_moe" for any config with
        num_experts_per_tok, which transformers 5 saves for every Nemotron-H."""
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(model_dir):
        if f != "config.json":
            os.symlink(os.path.abspath(os.path.join(model_dir, f)), os.path.join(out_dir, f))
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    if config["model_type"] == "granitemoehybrid" and "layer_types" in config:
        config["layer_types"] = ["attention" if t in ("attention", "full_attention") else "mamba"
                                 for t in config["layer_types"]]
    if config["model_type"] == "bamba":
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        config["attn_rotary_emb"] = head_dim // 2
    if config["model_type"] == "falcon_h1" and config.get("head_dim") is None:
        config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    if config["model_type"] == "nemotron_h":
        # The hub files' pattern string, or the list transformers 5 writes (which the converter
        # reads too).
        pattern = config.get("hybrid_override_pattern") or config["layers_block_type"]
        if "E" not in pattern and "moe" not in pattern:
            for key in NEMOTRON_H_MOE_KEYS:
                config.pop(key, None)
        config["num_hidden_layers"] = len(pattern)
        config["mamba_d_head"] = config["mamba_head_dim"]
        config["model_type"] = "nemotron_h_as_published"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return out_dir


# granitehybrid's per-layer names (llama.cpp's tensor_mapping for GraniteMoeHybridForCausalLM and
# BambaForCausalLM) and transformers' (the in-memory names of its modules). A list value: the
# GGUF tensors concatenated along `axis` (the converter split a fused tensor).
GRANITE_MIXER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ssm_in.weight": "mamba.in_proj.weight", "ssm_conv1d.weight": "mamba.conv1d.weight",
    "ssm_conv1d.bias": "mamba.conv1d.bias", "ssm_dt.bias": "mamba.dt_bias", "ssm_a": "mamba.A_log",
    "ssm_d": "mamba.D", "ssm_norm.weight": "mamba.norm.weight",
    "ssm_out.weight": "mamba.out_proj.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
}
GRANITE_FFN = {
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate_inp.weight": "block_sparse_moe.router.weight",
    "ffn_down_exps.weight": "block_sparse_moe.experts.down_proj",
    "ffn_down_shexp.weight": "shared_mlp.output_linear.weight",
    "ffn_down.weight": "shared_mlp.output_linear.weight",
}
GRANITE_FUSED = {  # HF name: ([GGUF parts], axis)
    "block_sparse_moe.experts.gate_up_proj": (["ffn_gate_exps.weight", "ffn_up_exps.weight"], 1),
    "shared_mlp.input_linear.weight": (["ffn_gate_shexp.weight", "ffn_up_shexp.weight"], 0),
    "dense:shared_mlp.input_linear.weight": (["ffn_gate.weight", "ffn_up.weight"], 0),
}
BAMBA_FFN = {"ffn_norm.weight": "pre_ff_layernorm.weight"}
for _w in ("gate", "up", "down"):
    for _s in ("weight", "bias"):
        BAMBA_FFN[f"ffn_{_w}.{_s}"] = f"feed_forward.{_w}_proj.{_s}"


# falcon-h1's per-layer names besides the mixer's (GRANITE_MIXER): the pre-MLP norm is written
# without a ".weight" suffix.
FALCON_H1_LAYER = {
    "ffn_norm": "pre_ff_layernorm.weight",
    "ffn_gate.weight": "feed_forward.gate_proj.weight",
    "ffn_up.weight": "feed_forward.up_proj.weight",
    "ffn_down.weight": "feed_forward.down_proj.weight",
}
# The config changes that make transformers run the model a falcon-h1 file stands for: the
# converter multiplied every muP multiplier into the weights.
FALCON_H1_UNIT_MULTIPLIERS = dict(
    embedding_multiplier=1.0, lm_head_multiplier=1.0, attention_in_multiplier=1.0,
    attention_out_multiplier=1.0, key_multiplier=1.0, ssm_in_multiplier=1.0,
    ssm_out_multiplier=1.0, mlp_multipliers=[1.0, 1.0], ssm_multipliers=[1.0] * 5)


# nemotron_h's per-layer names: one "mixer" module per block (Mamba-2, attention or the MLP).
NEMOTRON_H_LAYER = {"attn_norm.weight": "norm.weight"}
for _gguf, _hf in GRANITE_MIXER.items():
    if _gguf != "attn_norm.weight":
        NEMOTRON_H_LAYER[_gguf] = "mixer." + _hf.split(".", 1)[1]
for _p in ("in", "out"):  # use_bias
    NEMOTRON_H_LAYER[f"ssm_{_p}.bias"] = f"mixer.{_p}_proj.bias"
for _w in ("up", "down"):
    for _s in ("weight", "bias"):
        NEMOTRON_H_LAYER[f"ffn_{_w}.{_s}"] = f"mixer.{_w}_proj.{_s}"
        NEMOTRON_H_LAYER[f"ffn_{_w}_shexp.{_s}"] = f"mixer.shared_experts.{_w}_proj.{_s}"
    # nemotron_h_moe's experts, stacked by the converter (E, F, d) / (E, d, F) as transformers
    # 5 holds them.
    NEMOTRON_H_LAYER[f"ffn_{_w}_exps.weight"] = f"mixer.experts.{_w}_proj"
# The latent projections around the experts (moe_latent_size): down to the latent width before
# them (fc1), up after (fc2).
for _s in ("weight", "bias"):
    NEMOTRON_H_LAYER[f"ffn_latent_down.{_s}"] = f"mixer.fc1_latent_proj.{_s}"
    NEMOTRON_H_LAYER[f"ffn_latent_up.{_s}"] = f"mixer.fc2_latent_proj.{_s}"
# The router and its correction bias (the converter's exp_probs_b).
NEMOTRON_H_LAYER["ffn_gate_inp.weight"] = "mixer.gate.weight"
NEMOTRON_H_LAYER["exp_probs_b.bias"] = "mixer.gate.e_score_correction_bias"
# The keys of transformers 5's NemotronHConfig for its MoE layers (converter_input drops them).
NEMOTRON_H_MOE_KEYS = (
    "num_experts_per_tok", "n_routed_experts", "n_shared_experts", "moe_intermediate_size",
    "moe_shared_expert_intermediate_size", "moe_latent_size", "moe_shared_expert_overlap",
    "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group", "mtp_layers_block_type",
    "num_nextn_predict_layers")


# jamba's per-layer names: the Mamba-1 mixer with Jamba's RMSNorms on dt, B and C, attention,
# then the MLP or the experts' router; the experts, stacked apart by the converter, are fused
# again as transformers holds them (JAMBA_FUSED).
JAMBA_LAYER = {k: v for k, v in GRANITE_MIXER.items() if k not in ("ssm_dt.bias", "ssm_norm.weight")}
JAMBA_LAYER.update({
    "ssm_x.weight": "mamba.x_proj.weight", "ssm_dt.weight": "mamba.dt_proj.weight",
    "ssm_dt.bias": "mamba.dt_proj.bias", "ssm_dt_norm.weight": "mamba.dt_layernorm.weight",
    "ssm_b_norm.weight": "mamba.b_layernorm.weight",
    "ssm_c_norm.weight": "mamba.c_layernorm.weight",
    "ffn_norm.weight": "pre_ff_layernorm.weight",
    "ffn_gate_inp.weight": "feed_forward.router.weight",
    "ffn_down_exps.weight": "feed_forward.experts.down_proj",
})
for _w in ("gate", "up", "down"):
    JAMBA_LAYER[f"ffn_{_w}.weight"] = f"feed_forward.{_w}_proj.weight"
JAMBA_FUSED = {
    "feed_forward.experts.gate_up_proj": (["ffn_gate_exps.weight", "ffn_up_exps.weight"], 1),
}


def sentencepiece_scores(model_dir):
    """{token id: score} of the pieces the merges of a fixture's SentencePiece-style
    tokenizer.json make, as a SentencePiece BPE model scores them: minus the rank of the first
    merge that makes each (llama.cpp's SentencePiece merging joins the pair whose piece scores
    highest, transformers' BPE the pair whose merge ranks first)."""
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        model = json.load(f)["model"]
    scores = {}
    for r, (a, b) in enumerate(model["merges"]):
        scores.setdefault(model["vocab"][a + b], -float(r))
    return scores


def sentencepiece_vocabulary(path, model_dir):
    """Gives the "llama" vocabulary of a jamba file converted from the fixture's tokenizer.json
    alone what a conversion from a SentencePiece model of the same tokenizer writes, in place
    (same sizes). Without a tokenizer.model the converter reads tokenizer.json through its
    LlamaHfVocab, which scores every token -1000 and writes add_space_prefix false, so the
    file's tokenizer is not transformers': with equal scores llama.cpp's SentencePiece merging
    takes the leftmost pair instead of the one the BPE merges rank first, and no "▁" goes before
    the text. A SentencePiece BPE model scores each merged piece by its merge's rank
    (sentencepiece_scores) and says add_dummy_prefix, which the fixture's Prepend("▁")
    normalizer stands for."""
    gguf = gguf_py()
    rank = sentencepiece_scores(model_dir)
    reader = gguf.GGUFReader(path, "r+")
    scores = reader.fields["tokenizer.ggml.scores"]
    for token, part in enumerate(scores.data):
        if token in rank:
            scores.parts[part][0] = rank[token]
    prefix = reader.fields["tokenizer.ggml.add_space_prefix"]
    prefix.parts[prefix.data[0]][0] = True
    reader.data.flush()
    del reader
    return path


def sentencepiece_metadata(meta, model_dir, rows):
    """The tokenizer.ggml.* values of `meta` (gguf-py's contents of a jamba file the converter
    wrote from the fixture's tokenizer.json alone) as a conversion from a SentencePiece model of
    the same tokenizer states them (the values sentencepiece_vocabulary patches, and what it
    cannot patch in place): one token per embedding row (`rows`; the converter pads a
    tokenizer.model's vocabulary with unused "[PADi]"), the scores of sentencepiece_scores
    (-1000 for the rest), the unk_token unknown and the special added tokens control (the
    converter asks transformers, which without a tokenizer_config.json knows no special
    token), add_space_prefix."""
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta["tokenizer.ggml.token_type"])
    pad = range(len(tokens), rows)
    tokens += [f"[PAD{i}]" for i in pad]
    types += [5] * len(pad)  # UNUSED
    for a in tokenizer["added_tokens"]:
        if a["special"]:
            types[a["id"]] = 3  # CONTROL
    types[tokenizer["model"]["vocab"][tokenizer["model"]["unk_token"]]] = 2  # UNKNOWN
    rank = sentencepiece_scores(model_dir)
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.scores": [rank.get(i, -1000.0) for i in range(rows)],
            "tokenizer.ggml.add_space_prefix": True}


def unpermute_rows(w, heads):
    """The inverse of the converter's Q / K row order for llama.cpp's rope: within each head the
    stored rows are the two halves interleaved."""
    rows = w.shape[0]
    e = rows // heads
    return (w.reshape(heads, e // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def hybrid_state_dict(path, config):
    """{transformers name: float32 array} of a granitehybrid, falcon-h1, nemotron_h(_moe) or jamba
    GGUF file written from the checkpoint whose config.json is `config` (a dict), every tensor
    dequantized with gguf-py and every conversion step undone: A = -exp(A_log) back to A_log,
    the conv weight's squeezed axis and the (H, 1) / (G, D / G) shapes, Q and K's rows put back
    (granitehybrid, nemotron_h), the split gate / up tensors and the stacked experts fused
    again as transformers holds them (nemotron_h_moe's ungated experts: the stacks as they are,
    its router's correction bias renamed back). Falcon-H1's multipliers stay folded into its weights
    (FALCON_H1_UNIT_MULTIPLIERS)."""
    gguf = gguf_py()
    reader = gguf.GGUFReader(path)
    bamba = config["model_type"] == "bamba"
    falcon = config["model_type"] == "falcon_h1"
    nemotron = config["model_type"] == "nemotron_h"
    jamba = config["model_type"] == "jamba"
    permuted = not (falcon or jamba)  # these converters leave Q and K in the checkpoint's order
    stored = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
              for t in reader.tensors}
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    if nemotron:
        out = {"model.embeddings.weight": stored.pop("token_embd.weight"),
               "model.norm_f.weight": stored.pop("output_norm.weight")}
    else:
        out = {"model.embed_tokens.weight": stored.pop("token_embd.weight"),
               ("model.final_layernorm.weight" if bamba or falcon or jamba
                else "model.norm.weight"):
                   stored.pop("output_norm.weight")}
    if "output.weight" in stored:
        out["lm_head.weight"] = stored.pop("output.weight")
    n_layer = config.get("num_hidden_layers") or len(config.get("hybrid_override_pattern")
                                                      or config["layers_block_type"])
    for layer in range(n_layer):
        blk, hf = f"blk.{layer}.", f"model.layers.{layer}."
        if not bamba and not falcon and not nemotron:
            for name, (parts, axis) in (JAMBA_FUSED if jamba else GRANITE_FUSED).items():
                if all(blk + p in stored for p in parts):
                    out[hf + name.split(":")[-1]] = np.concatenate(
                        [stored.pop(blk + p) for p in parts], axis=axis)
        names = NEMOTRON_H_LAYER if nemotron else JAMBA_LAYER if jamba else {
            **GRANITE_MIXER, **(BAMBA_FFN if bamba else FALCON_H1_LAYER if falcon else GRANITE_FFN)}
        for rest, target in names.items():
            if blk + rest not in stored:
                continue
            values = stored.pop(blk + rest)
            if rest == "ssm_a":  # Mamba-1's (D, N) as stored, Mamba-2's (H, 1) to (H)
                values = np.log(-values.astype(np.float64)).astype(np.float32)
                values = values if jamba else values.reshape(-1)
            elif rest in ("ssm_d", "ssm_norm.weight"):
                values = values.reshape(-1)
            elif rest == "ssm_conv1d.weight":
                values = values[:, None, :]
            elif rest == "attn_q.weight" and permuted:
                values = unpermute_rows(values, heads)
            elif rest == "attn_k.weight" and permuted:
                values = unpermute_rows(values, kv_heads)
            out[hf + target] = values
    assert not stored, f"tensors not mapped: {sorted(stored)}"
    return out
