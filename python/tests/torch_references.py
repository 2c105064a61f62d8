"""Plain PyTorch references of every op, written from the math in include/ssmkit/*.hpp as
step-by-step loops, for float64 autograd in the ssmkit.torch tests. Same signatures as
ssmkit.torch (the subset the tests use). Slow on purpose: short and obviously right.

Dimension legend: B batch, L length, D channels, N state size, H heads, P head dim, G groups,
K conv width, E features.
"""
import torch
import torch.nn.functional as F


def softplus_20(v):
    """softplus, the identity above 20 (as mamba_ssm and ssmkit)."""
    return torch.where(v > 20.0, v, F.softplus(torch.clamp(v, max=20.0)))


def _scan_bc(X, batch, dim, seqlen):
    """B or C of the selective scan in any of its forms as (B, D, N, L)."""
    if X.dim() == 2:  # (D, N) constant over batch and time
        return X[None, :, :, None].expand(batch, dim, X.shape[1], seqlen)
    if X.dim() == 3:  # (B, N, L)
        return X[:, None].expand(batch, dim, *X.shape[1:])
    return X.repeat_interleave(dim // X.shape[1], dim=1)  # (B, G, N, L)


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, *, initial_state=None):
    batch, dim, seqlen = u.shape
    dt = delta + (0.0 if delta_bias is None else delta_bias[None, :, None])
    dt = softplus_20(dt) if delta_softplus else dt
    Bf, Cf = _scan_bc(B, batch, dim, seqlen), _scan_bc(C, batch, dim, seqlen)
    h = (torch.zeros(batch, dim, A.shape[1], dtype=u.dtype) if initial_state is None
         else initial_state)
    ys = []
    for t in range(seqlen):
        h = torch.exp(dt[..., t, None] * A) * h + (dt[..., t] * u[..., t])[..., None] * Bf[..., t]
        ys.append((h * Cf[..., t]).sum(-1))
    y = torch.stack(ys, -1)
    if D is not None:
        y = y + D[None, :, None] * u
    if z is not None:
        y = y * F.silu(z)
    return (y, h) if return_last_state else y


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=0, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, dt_softplus=False,
                              dt_limit=(0.0, float("inf")), return_final_states=False):
    batch, seqlen, heads, headdim = x.shape
    per_group = heads // B.shape[2]
    dt = dt + (0.0 if dt_bias is None else dt_bias)
    dt = softplus_20(dt) if dt_softplus else dt
    dt = torch.clamp(dt, dt_limit[0], dt_limit[1])
    Bh = B.repeat_interleave(per_group, dim=2)  # (B, L, H, N)
    Ch = C.repeat_interleave(per_group, dim=2)
    h = (torch.zeros(batch, heads, headdim, B.shape[-1], dtype=x.dtype)
         if initial_states is None else initial_states)
    ys = []
    for t in range(seqlen):
        if seq_idx is not None and t > 0:
            keep = (seq_idx[:, t] == seq_idx[:, t - 1]).to(x.dtype)
            h = h * keep[:, None, None, None]
        decay = torch.exp(dt[:, t] * A)[..., None, None]  # (B, H, 1, 1)
        h = decay * h + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append((h * Ch[:, t, :, None, :]).sum(-1))
    y = torch.stack(ys, 1)  # (B, L, H, P)
    if D is not None:
        y = y + (D[:, None] if D.dim() == 1 else D) * x
    if z is not None:
        y = y * F.silu(z)
    return (y, h) if return_final_states else y


def causal_conv1d_fn(x, weight, bias=None, initial_states=None, return_final_states=False,
                     activation=None):
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    init = (torch.zeros(batch, dim, width - 1, dtype=x.dtype) if initial_states is None
            else initial_states)
    xpad = torch.cat([init, x], dim=-1)
    out = sum(weight[None, :, k, None] * xpad[..., k:k + seqlen] for k in range(width))
    if bias is not None:
        out = out + bias[None, :, None]
    if activation in ("silu", "swish"):
        out = F.silu(out)
    return (out, xpad[..., seqlen:]) if return_final_states else out


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    if z is not None and not norm_before_gate:
        x = x * F.silu(z)
    size = group_size or x.shape[-1]
    groups = x.reshape(*x.shape[:-1], x.shape[-1] // size, size)
    rstd = torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + eps)
    y = (groups * rstd).reshape(x.shape) * weight
    if bias is not None:
        y = y + bias
    if z is not None and norm_before_gate:
        y = y * F.silu(z)
    return y


def rms_norm_fn(x, weight, bias, residual=None, eps=1e-6, prenorm=False, residual_in_fp32=True):
    residual_out = x if residual is None else x + residual
    out = rmsnorm_fn(residual_out, weight, bias, eps=eps)
    return (out, residual_out) if prenorm else out


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False):
    """Functional: returns (out, new state). Mamba-1 (state (B, D, N)) or Mamba-2 with the
    kernel's per-head forms (state (B, H, P, N), dt (B, H), A (H), dt_bias (H))."""
    dt = dt + (0.0 if dt_bias is None else dt_bias)
    dt = softplus_20(dt) if dt_softplus else dt
    if state.dim() == 3:  # (B, D, N); B, C (B, N) or (B, G, N)
        Bd = B[:, None] if B.dim() == 2 else B.repeat_interleave(x.shape[1] // B.shape[1], 1)
        Cd = C[:, None] if C.dim() == 2 else C.repeat_interleave(x.shape[1] // C.shape[1], 1)
        state = torch.exp(dt[..., None] * A) * state + (dt * x)[..., None] * Bd
        y = (state * Cd).sum(-1) + (0.0 if D is None else D * x)
    else:  # (B, H, P, N); B, C (B, G, N)
        Bh = B.repeat_interleave(x.shape[1] // B.shape[1], 1)[:, :, None]
        Ch = C.repeat_interleave(x.shape[1] // C.shape[1], 1)[:, :, None]
        state = (torch.exp(dt * A)[..., None, None] * state
                 + (dt[..., None] * x)[..., None] * Bh)
        skip = 0.0 if D is None else (D[:, None] if D.dim() == 1 else D) * x
        y = (state * Ch).sum(-1) + skip
    return (y if z is None else y * F.silu(z)), state


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None):
    """Functional: returns (out, new conv_state); x (B, D) or (B, D, T)."""
    steps = x if x.dim() == 3 else x[..., None]
    width = weight.shape[1]
    outs = []
    for t in range(steps.shape[-1]):
        window = torch.cat([conv_state[..., conv_state.shape[-1] - (width - 1):],
                            steps[..., t:t + 1]], -1)
        o = (window * weight).sum(-1) + (0.0 if bias is None else bias)
        outs.append(F.silu(o) if activation in ("silu", "swish") else o)
        conv_state = torch.cat([conv_state[..., 1:], steps[..., t:t + 1]], -1)
    out = torch.stack(outs, -1)
    return (out if x.dim() == 3 else out[..., 0]), conv_state
