"""mamba_ssm's two RMSNorm modules over ssmkit's kernels, with its constructor arguments and
parameter names (weight; bias registered as None)."""
import torch
from torch import nn

from ._functions import rms_norm_fn, rmsnorm_fn


class RMSNorm(nn.Module):
    """mamba_ssm.ops.triton.layer_norm.RMSNorm: RMSNorm with an optional residual added first
    (rms_norm_fn). Dropout is not supported (dropout_p must be 0)."""

    def __init__(self, hidden_size, eps=1e-5, dropout_p=0.0, device=None, dtype=None):
        super().__init__()
        if dropout_p:
            raise NotImplementedError(f"RMSNorm: dropout_p={dropout_p} is not supported by "
                                      f"ssmkit (only 0.0)")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return rms_norm_fn(x, self.weight, self.bias, residual=residual, eps=self.eps,
                           prenorm=prenorm, residual_in_fp32=residual_in_fp32)


class RMSNormGated(nn.Module):
    """mamba_ssm.ops.triton.layernorm_gated.RMSNorm (Mamba2's norm): norm(x) * silu(z) when
    norm_before_gate, else norm(x * silu(z)); group_size splits the features into groups
    normalised separately (None: one group)."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True,
                 device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.group_size = group_size
        self.norm_before_gate = norm_before_gate

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, x, z=None):
        return rmsnorm_fn(x, self.weight, self.bias, z=z, eps=self.eps,
                          group_size=self.group_size, norm_before_gate=self.norm_before_gate)
