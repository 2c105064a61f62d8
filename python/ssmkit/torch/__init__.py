"""ssmkit for PyTorch: mamba_ssm's and causal-conv1d's ops and modules on any machine.

    from ssmkit.torch import selective_scan_fn, mamba_chunk_scan_combined, Mamba, Mamba2

Every op is a torch custom operator (torch.ops.ssmkit.*) with a fake implementation and an
autograd registration wired to ssmkit's fused backward, on CPU tensors and, when ssmkit was
built with its CUDA backend, CUDA tensors (on the current stream). torch.compile traces the
ops and the modules without graph breaks. Importing ssmkit does not import torch; importing
ssmkit.torch does (pip install ./python[torch]).

- Functions with mamba_ssm's names and arguments: selective_scan_fn,
  mamba_chunk_scan_combined, selective_state_update, causal_conv1d_fn, causal_conv1d_update,
  rmsnorm_fn (gated), rms_norm_fn (residual add + RMSNorm); and linear (F.linear on ssmkit's
  kernel, a bf16 / f16 weight read in its own dtype).
- Modules with mamba_ssm's constructor arguments and parameter names (its state dicts load
  unchanged): Mamba, Mamba2, Block, MambaLMHeadModel (+ MambaConfig, InferenceParams),
  RMSNorm, RMSNormGated.
- accelerate(model): a transformers Mamba / Mamba-2 model (or a hybrid reusing their mixers)
  runs its forward, backward and generate on ssmkit's kernels, keeping class and parameters.
"""
from ._accelerate import accelerate
from ._functions import (causal_conv1d_fn, causal_conv1d_update, linear,
                         mamba_chunk_scan_combined, rms_norm_fn, rmsnorm_fn, selective_scan_fn,
                         selective_state_update)
from ._generation import InferenceParams
from ._lm import Block, GatedMLP, MambaConfig, MambaLMHeadModel, MixerModel
from ._mamba import Mamba
from ._mamba2 import Mamba2
from ._norm import RMSNorm, RMSNormGated

__all__ = [
    "selective_scan_fn", "mamba_chunk_scan_combined", "selective_state_update",
    "causal_conv1d_fn", "causal_conv1d_update", "rmsnorm_fn", "rms_norm_fn", "Mamba", "Mamba2",
    "Block", "GatedMLP", "MixerModel", "MambaLMHeadModel", "MambaConfig", "InferenceParams",
    "RMSNorm", "RMSNormGated", "accelerate", "linear",
]
