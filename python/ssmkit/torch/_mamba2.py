"""mamba_ssm's Mamba2 (modules/mamba2.py) on ssmkit's kernels: the same constructor arguments
and parameter names (in_proj, conv1d, dt_bias, A_log, D, norm.weight, out_proj), so its state
dicts load unchanged; forward (training or prefill, packed sequences by seq_idx or cu_seqlens)
and step (one decode token).
Tensor parallelism (process_group) is not supported; data parallelism is (docs).

Dimension legend: B batch, L length, E d_model, I d_inner, S d_ssm (I minus the gated MLP
part), H heads, P headdim, G ngroups, N d_state, W d_conv, C conv channels = S + 2 G N.
"""
import torch
from torch import nn
from torch.nn import functional as F

from ._functions import (causal_conv1d_fn, causal_conv1d_update, mamba_chunk_scan_combined,
                         selective_state_update)
from ._mixer_cache import (cache_batch, conv_seq_idx, dt_bias_init, keep_conv_window,
                           states_from_cache)
from ._norm import RMSNormGated


class Mamba2(nn.Module):
    def __init__(self, d_model, d_state=128, d_conv=4, conv_init=None, expand=2, headdim=64,
                 d_ssm=None, ngroups=1, A_init_range=(1, 16), D_has_hdim=False, rmsnorm=True,
                 norm_before_gate=False, dt_min=0.001, dt_max=0.1, dt_init_floor=1e-4,
                 dt_limit=(0.0, float("inf")), bias=False, conv_bias=True, chunk_size=256,
                 use_mem_eff_path=True, layer_idx=None, process_group=None,
                 sequence_parallel=True, device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        if process_group is not None:
            raise NotImplementedError("Mamba2: process_group (tensor parallelism) is not "
                                      "supported by ssmkit; data parallelism is")
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.conv_init = conv_init
        self.process_group, self.sequence_parallel = None, sequence_parallel
        self.world_size, self.local_rank = 1, 0
        self.d_inner = expand * d_model
        self.headdim = headdim
        self.d_ssm = self.d_inner if d_ssm is None else d_ssm
        self.ngroups = ngroups
        if self.d_ssm % headdim:
            raise ValueError(f"Mamba2: d_ssm = {self.d_ssm} must be a multiple of headdim = "
                             f"{headdim}")
        self.nheads = self.d_ssm // headdim
        self.D_has_hdim, self.rmsnorm, self.norm_before_gate = D_has_hdim, rmsnorm, norm_before_gate
        self.dt_limit = tuple(dt_limit)
        self.activation = "silu"
        self.act = nn.SiLU()
        self.chunk_size = chunk_size
        self.use_mem_eff_path = use_mem_eff_path  # accepted for compatibility: one path here
        self.layer_idx = layer_idx

        # in_proj's output, in order: [z, x, B, C, dt] (after a gated-MLP part when d_ssm < I).
        d_in_proj = 2 * self.d_inner + 2 * ngroups * d_state + self.nheads
        self.in_proj = nn.Linear(d_model, d_in_proj, bias=bias, **factory)
        self.conv_dim = self.d_ssm + 2 * ngroups * d_state
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim,
                                padding=d_conv - 1, bias=conv_bias, **factory)
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)

        # mamba_ssm's initialisation: softplus(dt_bias) in [dt_min, dt_max], A uniform in
        # A_init_range (kept as log), D = 1.
        self.dt_bias = nn.Parameter(dt_bias_init(self.nheads, dt_min, dt_max, dt_init_floor,
                                                 device).to(dtype or torch.float32))
        self.dt_bias._no_weight_decay = True
        if not 0 < A_init_range[0] <= A_init_range[1]:
            raise ValueError(f"Mamba2: A_init_range = {A_init_range}: expected 0 < lo <= hi")
        A = torch.empty(self.nheads, dtype=torch.float32, device=device).uniform_(*A_init_range)
        self.A_log = nn.Parameter(torch.log(A).to(dtype or torch.float32))
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(self.d_ssm if D_has_hdim else self.nheads,
                                         device=device))
        self.D._no_weight_decay = True
        if rmsnorm:
            self.norm = RMSNormGated(self.d_ssm, eps=1e-5, norm_before_gate=norm_before_gate,
                                     group_size=self.d_ssm // ngroups, **factory)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **factory)

    def _D(self):
        return self.D.view(self.nheads, self.headdim) if self.D_has_hdim else self.D

    def _split(self, zxbcdt):
        """(z0, x0, z, xBC, dt) of in_proj's output; z0, x0 are the gated MLP's (width 0 when
        d_ssm = d_inner)."""
        d_mlp = (zxbcdt.shape[-1] - 2 * self.d_ssm - 2 * self.ngroups * self.d_state
                 - self.nheads) // 2
        return torch.split(zxbcdt, [d_mlp, d_mlp, self.d_ssm, self.conv_dim, self.nheads],
                           dim=-1)

    def _finish(self, y, z, z0, x0):
        """Gated norm, the gated MLP part, out_proj."""
        if self.rmsnorm:
            y = self.norm(y, z)
        if z0.shape[-1] > 0:
            y = torch.cat([F.silu(z0) * x0, y], dim=-1)
        return self.out_proj(y)

    def forward(self, u, seqlen=None, seq_idx=None, cu_seqlens=None, inference_params=None):
        """u (B, L, E), or (B L, E) with seqlen given -> the same shape. Packed sequences:
        seq_idx (B, L) (a change of value starts a new one) and/or cu_seqlens (S + 1) offsets
        with B = 1; a prefill with cu_seqlens leaves one decode state per sequence (S rows),
        as mamba_ssm's. Unlike mamba_ssm, whose training path reads only seq_idx, cu_seqlens
        alone also keeps the sequences apart."""
        batch = u.shape[0] if seqlen is None else u.shape[0] // seqlen
        seqlen = u.shape[1] if seqlen is None else seqlen
        conv_state = ssm_state = None
        if inference_params is not None:
            conv_state, ssm_state = states_from_cache(self, inference_params,
                                                      cache_batch(batch, cu_seqlens))
            if inference_params.seqlen_offset > 0:
                return self.step(u, conv_state, ssm_state)[0]

        z0, x0, z, xBC, dt = self._split(self.in_proj(u).view(batch, seqlen, -1))
        xBC = xBC.transpose(1, 2)  # (B, C, L)
        if conv_state is not None:
            keep_conv_window(conv_state, xBC, cu_seqlens)
        xBC = causal_conv1d_fn(xBC, self.conv1d.weight[:, 0], self.conv1d.bias,
                               activation=self.activation,
                               seq_idx=conv_seq_idx(seq_idx, cu_seqlens, seqlen)).transpose(1, 2)
        x, B, C = torch.split(xBC, [self.d_ssm, self.ngroups * self.d_state,
                                    self.ngroups * self.d_state], dim=-1)
        heads = (batch, seqlen, self.nheads, self.headdim)
        groups = (batch, seqlen, self.ngroups, self.d_state)
        y = mamba_chunk_scan_combined(
            x.reshape(heads), dt, -torch.exp(self.A_log.float()), B.reshape(groups),
            C.reshape(groups), chunk_size=self.chunk_size, D=self._D(),
            z=None if self.rmsnorm else z.reshape(heads), dt_bias=self.dt_bias,
            dt_softplus=True, seq_idx=seq_idx, cu_seqlens=cu_seqlens, dt_limit=self.dt_limit,
            return_final_states=ssm_state is not None and cu_seqlens is None,
            return_varlen_states=ssm_state is not None and cu_seqlens is not None)
        if ssm_state is not None:  # the one state output asked for
            y, last_state = y
            ssm_state.copy_(last_state)
        out = self._finish(y.reshape(batch, seqlen, self.d_ssm), z, z0, x0)
        return out if u.dim() == 3 else out.reshape(batch * seqlen, -1)

    def step(self, hidden_states, conv_state, ssm_state):
        """One token: hidden_states (B, 1, E); the states are updated in place. Returns
        (out (B, 1, E), conv_state, ssm_state)."""
        if hidden_states.shape[1] != 1:
            raise ValueError(f"Mamba2.step: expected one token per sequence, given "
                             f"{hidden_states.shape[1]}")
        batch = hidden_states.shape[0]
        z0, x0, z, xBC, dt = self._split(self.in_proj(hidden_states.squeeze(1)))
        xBC = causal_conv1d_update(xBC, conv_state, self.conv1d.weight[:, 0], self.conv1d.bias,
                                   self.activation)
        x, B, C = torch.split(xBC, [self.d_ssm, self.ngroups * self.d_state,
                                    self.ngroups * self.d_state], dim=-1)
        heads = (batch, self.nheads, self.headdim)
        y = selective_state_update(
            ssm_state, x.reshape(heads), dt, -torch.exp(self.A_log.float()),
            B.reshape(batch, self.ngroups, self.d_state),
            C.reshape(batch, self.ngroups, self.d_state), self._D(),
            z=None if self.rmsnorm else z.reshape(heads), dt_bias=self.dt_bias, dt_softplus=True)
        out = self._finish(y.reshape(batch, self.d_ssm), z, z0, x0)
        return out.unsqueeze(1), conv_state, ssm_state

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        """(conv_state (B, C, W), ssm_state (B, H, P, N)), both float32 whatever `dtype` (the
        decode kernels keep their states in f32; mamba_ssm uses the weights' dtype)."""
        device = self.out_proj.weight.device
        conv_state = torch.zeros(batch_size, self.conv_dim, self.d_conv, device=device)
        ssm_state = torch.zeros(batch_size, self.nheads, self.headdim, self.d_state,
                                device=device)
        return conv_state, ssm_state

    def _get_states_from_cache(self, inference_params, batch_size, initialize_states=False):
        return states_from_cache(self, inference_params, batch_size, initialize_states)
