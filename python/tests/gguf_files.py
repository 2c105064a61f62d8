"""GGUF files for the tests, written by the peer: llama.cpp's convert_hf_to_gguf.py (from the
llama-cpp-python source distribution, scripts/llama_cpp_converter.sh), and read back with its
gguf-py into the Hugging Face state dict the file stands for (dequantized to float32), so that
transformers can run the very numbers the file holds.

The converter names a byte-level BPE pre-tokenizer by hashing how the tokenizer splits a probe
text and refuses one it does not know; the fixtures' tokenizer is GPT-NeoX's byte-level one cut
down to 300 tokens, which llama.cpp knows as "gpt-2", so the tests tell it so."""
import functools
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


def convert(model_dir, out_path, outtype):
    """convert_hf_to_gguf.py MODEL_DIR --outfile OUT --outtype TYPE, in a child process."""
    code = ("import runpy, sys\n"
            "script = sys.argv[1]\n"
            "sys.path.insert(0, script.rsplit('/', 1)[0])\n"
            "import conversion.base as base\n"
            "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'gpt-2'\n"
            "sys.argv = [script] + sys.argv[2:]\n"
            "runpy.run_path(script, run_name='__main__')\n")
    subprocess.run([sys.executable, "-c", code, converter(), model_dir, "--outfile", out_path,
                    "--outtype", outtype], check=True, capture_output=True)
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


def transformers_logits(model_dir, state_dict, ids):
    """transformers' logits (L, V) for one prompt, with the checkpoint's config and the given
    weights (float32)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict.items()}
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["backbone.embeddings.weight"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].numpy()
