"""ssmkit: selective state space model (Mamba-1, Mamba-2) kernels, forward and backward.

The functions here take numpy arrays and carry mamba_ssm's names and arguments; `ssmkit.jax`
has the same ops for JAX (XLA FFI custom calls with gradients). The inference engine is here
too: `Model.load(path)` (or `Model.load()` for the built-in model), sessions with prefill and
decode logits, tokenizers, and `Model.generate` / `Model.stream`.
"""
from ._numpy import (AddRmsNormGrads, Conv1dGrads, RmsNormGrads, SelectiveScanGrads, SsdGrads,
                     bfloat16, causal_conv1d_bwd, causal_conv1d_fn, causal_conv1d_update,
                     mamba_chunk_scan_combined, mamba_chunk_scan_combined_bwd, rms_norm_bwd,
                     rms_norm_fn, rmsnorm_bwd, rmsnorm_fn, selective_scan_bwd, selective_scan_fn,
                     selective_state_update)
from ._generation import Generation, Token, Tokenizer, TokenStream
from ._model import Model, Session
from ._ssmkit import (InternalError, InvalidArgumentError, OutOfMemoryError, UnsupportedError,
                      __version__, bf16_products, default_model_dir, num_threads,
                      set_bf16_products, set_num_threads)

__all__ = [
    "selective_scan_fn", "selective_scan_bwd", "mamba_chunk_scan_combined",
    "mamba_chunk_scan_combined_bwd", "selective_state_update", "causal_conv1d_fn",
    "causal_conv1d_bwd", "causal_conv1d_update", "rmsnorm_fn", "rmsnorm_bwd", "rms_norm_fn",
    "rms_norm_bwd", "SelectiveScanGrads", "SsdGrads", "Conv1dGrads", "RmsNormGrads",
    "AddRmsNormGrads", "InvalidArgumentError", "UnsupportedError", "OutOfMemoryError",
    "InternalError", "set_num_threads", "num_threads", "set_bf16_products", "bf16_products",
    "bfloat16", "__version__",
    "Model", "Session", "Tokenizer", "Token", "TokenStream", "Generation", "default_model_dir",
]
