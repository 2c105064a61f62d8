"""mamba_ssm's Mamba (modules/mamba_simple.py) on ssmkit's kernels: the same constructor
arguments and parameter names (in_proj, conv1d, x_proj, dt_proj, A_log, D, out_proj), so its
state dicts load unchanged; forward (training or prefill) and step (one decode token). Beyond
mamba_ssm's Mamba: packed sequences (seq_idx, cu_seqlens), as its Mamba2 takes them.

Dimension legend: B batch, L length, E d_model, D d_inner, N d_state, R dt_rank, W d_conv.
"""
import math

import torch
from torch import nn

from ._functions import causal_conv1d_fn, causal_conv1d_update, selective_scan_fn
from ._functions import selective_state_update
from ._mixer_cache import (cache_batch, conv_seq_idx, dt_bias_init, keep_conv_window,
                           states_from_cache)


def channels_first_linear(weight, x):
    """weight @ x over the last dim of x (B, L, E), laid out (B, D, L) with dense L: the
    matrix product writes (D, B L), whose (B, D, L) view the scan and conv read in place."""
    batch, seqlen, _ = x.shape
    y = weight @ x.reshape(batch * seqlen, -1).t()  # (D, B L)
    return y.view(weight.shape[0], batch, seqlen).permute(1, 0, 2)


class Mamba(nn.Module):
    def __init__(self, d_model, d_state=16, d_conv=4, expand=2, dt_rank="auto", dt_min=0.001,
                 dt_max=0.1, dt_init="random", dt_scale=1.0, dt_init_floor=1e-4, conv_bias=True,
                 bias=False, use_fast_path=True, layer_idx=None, device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.d_inner = int(expand * d_model)
        self.dt_rank = math.ceil(d_model / 16) if dt_rank == "auto" else dt_rank
        self.use_fast_path = use_fast_path  # accepted for compatibility: ssmkit has one path
        self.layer_idx = layer_idx
        self.activation = "silu"
        self.act = nn.SiLU()

        self.in_proj = nn.Linear(d_model, 2 * self.d_inner, bias=bias, **factory)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, d_conv, groups=self.d_inner,
                                padding=d_conv - 1, bias=conv_bias, **factory)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + 2 * d_state, bias=False, **factory)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True, **factory)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **factory)

        # mamba_ssm's initialisation: dt_proj keeps the variance of its input, softplus of its
        # bias lies in [dt_min, dt_max]; A = -(1..N) per channel (S4D real); D = 1.
        std = self.dt_rank ** -0.5 * dt_scale
        if dt_init == "constant":
            nn.init.constant_(self.dt_proj.weight, std)
        elif dt_init == "random":
            nn.init.uniform_(self.dt_proj.weight, -std, std)
        else:
            raise NotImplementedError(f"Mamba: dt_init={dt_init!r}: expected 'constant' or "
                                      f"'random'")
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt_bias_init(self.d_inner, dt_min, dt_max, dt_init_floor,
                                                 device))
        self.dt_proj.bias._no_reinit = True
        A = torch.arange(1, d_state + 1, dtype=torch.float32, device=device)
        self.A_log = nn.Parameter(torch.log(A).repeat(self.d_inner, 1))  # (D, N), f32
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(self.d_inner, device=device))  # f32
        self.D._no_weight_decay = True

    def forward(self, hidden_states, inference_params=None, seq_idx=None, cu_seqlens=None):
        """hidden_states (B, L, E) -> (B, L, E). With inference_params: a prefill that leaves
        this layer's states in it (seqlen_offset == 0), else one decode step. Packed
        sequences (which mamba_ssm's Mamba lacks), as Mamba2 takes them: seq_idx (B, L) and/or
        cu_seqlens (S + 1) with B = 1, whose prefill leaves one state per sequence."""
        batch, seqlen, _ = hidden_states.shape
        conv_state = ssm_state = None
        if inference_params is not None:
            conv_state, ssm_state = states_from_cache(self, inference_params,
                                                      cache_batch(batch, cu_seqlens))
            if inference_params.seqlen_offset > 0:
                return self.step(hidden_states, conv_state, ssm_state)[0]

        xz = channels_first_linear(self.in_proj.weight, hidden_states)  # (B, 2D, L)
        if self.in_proj.bias is not None:
            xz = xz + self.in_proj.bias.to(xz.dtype)[:, None]
        x, z = xz.chunk(2, dim=1)
        if conv_state is not None:
            keep_conv_window(conv_state, x, cu_seqlens)
        x = causal_conv1d_fn(x, self.conv1d.weight[:, 0], self.conv1d.bias,
                             activation=self.activation,
                             seq_idx=conv_seq_idx(seq_idx, cu_seqlens, seqlen))
        x_dbl = self.x_proj(x.transpose(1, 2).reshape(batch * seqlen, self.d_inner))
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = (self.dt_proj.weight @ dt.t()).view(self.d_inner, batch, seqlen).permute(1, 0, 2)
        B = B.view(batch, seqlen, self.d_state).transpose(1, 2)  # (B, N, L)
        C = C.view(batch, seqlen, self.d_state).transpose(1, 2)
        A = -torch.exp(self.A_log.float())
        y = selective_scan_fn(x, dt, A, B, C, self.D.float(), z=z,
                              delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
                              seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                              return_last_state=ssm_state is not None and cu_seqlens is None,
                              return_varlen_states=ssm_state is not None and
                              cu_seqlens is not None)
        if ssm_state is not None:  # the one state output asked for
            y, last_state = y
            ssm_state.copy_(last_state)
        return self.out_proj(y.transpose(1, 2))

    def step(self, hidden_states, conv_state, ssm_state):
        """One token: hidden_states (B, 1, E); the states are updated in place. Returns
        (out (B, 1, E), conv_state, ssm_state)."""
        if hidden_states.shape[1] != 1:
            raise ValueError(f"Mamba.step: expected one token per sequence, given "
                             f"{hidden_states.shape[1]}")
        x, z = self.in_proj(hidden_states.squeeze(1)).chunk(2, dim=-1)  # (B, D) each
        x = causal_conv1d_update(x, conv_state, self.conv1d.weight[:, 0], self.conv1d.bias,
                                 self.activation)
        dt, B, C = torch.split(self.x_proj(x), [self.dt_rank, self.d_state, self.d_state],
                               dim=-1)
        dt = nn.functional.linear(dt, self.dt_proj.weight)  # the bias is added in the kernel
        A = -torch.exp(self.A_log.float())
        y = selective_state_update(ssm_state, x, dt, A, B, C, self.D, z=z,
                                   dt_bias=self.dt_proj.bias, dt_softplus=True)
        return self.out_proj(y).unsqueeze(1), conv_state, ssm_state

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        """(conv_state (B, D, W), ssm_state (B, D, N)), both float32 whatever `dtype` (the
        decode kernels keep their states in f32; mamba_ssm uses the weights' dtype)."""
        device = self.out_proj.weight.device
        conv_state = torch.zeros(batch_size, self.d_inner, self.d_conv, device=device)
        ssm_state = torch.zeros(batch_size, self.d_inner, self.d_state, device=device)
        return conv_state, ssm_state

    def _get_states_from_cache(self, inference_params, batch_size, initialize_states=False):
        return states_from_cache(self, inference_params, batch_size, initialize_states)
