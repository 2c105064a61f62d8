"""mamba_ssm's and causal-conv1d's functions on torch tensors, over the custom ops of _ops.py.

The names and arguments are theirs, so that `from mamba_ssm.ops... import X` becomes
`from ssmkit.torch import X`. What these wrappers add to the ops is only what mamba_ssm's
callers rely on: the small parameters (A, D, biases, norm and conv weights) are cast to
float32 (autograd carries their gradients back in the parameter's dtype), a tensor whose last
dimension is strided is copied (any other strides are read in place), index tensors become
int32 (cu_seqlens int32 or int64), and a decode state of another dtype than float32 is
updated through a float32 copy. All of it is ordinary torch code that autograd and
torch.compile trace.

Differentiable: selective_scan_fn, mamba_chunk_scan_combined, causal_conv1d_fn, rmsnorm_fn,
rms_norm_fn (with respect to every floating tensor argument, states included). The decode
steps (selective_state_update, causal_conv1d_update) update their state in place and have no
gradient, as in mamba_ssm.
"""
import torch

from . import _ops
from .. import _shapes

_F32 = torch.float32


def _f32(t):
    """A small parameter (A, D, a bias, a weight) as the float32 the kernels read."""
    return t if t is None or t.dtype == _F32 else t.float()


def _dense_last(t):
    """The kernels read any strides but need the last dimension dense."""
    if t is not None and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    return t


def _state(t):
    """A state input (initial_state(s)), float32 with its last dimension dense."""
    return _dense_last(_f32(t))


# Integer dtypes an index argument is converted from; any other dtype reaches the op, whose
# message names the argument and the dtypes it takes.
_OTHER_INTEGERS = (torch.int8, torch.uint8, torch.int16, torch.int64)


def _int32(t):
    """An index tensor (seq_idx, state_batch_indices) as the int32 the kernels read."""
    return t.to(torch.int32) if t is not None and t.dtype in _OTHER_INTEGERS else t


def _offsets(t):
    """cu_seqlens as int32 or int64, the dtypes the kernels read (smaller integers become
    int32)."""
    return t.to(torch.int32) if t is not None and t.dtype in _OTHER_INTEGERS[:3] else t


def _returns(out, *states):
    """mamba_ssm's return convention: out, then the states asked for, in order (None marks one
    that was not)."""
    states = tuple(t for t in states if t is not None)
    return (out, *states) if states else out


def _unsupported(fn, **arguments):
    """mamba_ssm arguments ssmkit does not implement (docs/integrations.md)."""
    for name, (value, default) in arguments.items():
        if (value is not None) if default is None else (value != default):
            raise NotImplementedError(f"{fn}: {name}={value!r} is not supported by ssmkit "
                                      f"(only {default!r}); see docs/integrations.md")


# ------------------------------------------------------------------ selective scan (Mamba-1)

def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, *, initial_state=None, seq_idx=None,
                      cu_seqlens=None, return_varlen_states=False, algorithm="sequential",
                      chunk_length=0):
    """mamba_ssm's selective_scan_fn. u, delta: (B, D, L); A: (D, N); B, C: (D, N),
    (B, N, L) or (B, G, N, L); D, delta_bias: (D); z: (B, D, L). ssmkit's extras:
    initial_state (B, D, N), the forward's algorithm and chunk_length (speed only), and packed
    sequences, which mamba_ssm's Mamba-1 lacks: seq_idx (B, L) integers (a change of value
    starts a new sequence, from a zero state), or cu_seqlens (S + 1) offsets with B = 1, then
    initial_state may be (S, D, N), one per sequence, and return_varlen_states returns each
    sequence's last state (S, D, N) float32. Returns out (B, D, L), then last_state
    (B, D, N) float32 and the varlen states when asked for, in that order. Unlike mamba_ssm,
    the gradients of last_state and the varlen states are carried into the backward, and
    initial_state has one too."""
    fn = "selective_scan_fn"
    _shapes.algorithm_index(fn, _shapes.SCAN_ALGORITHMS, algorithm)
    # The chunk states make the backward skip its pass over the sequence; the CUDA backend
    # recomputes instead (it takes none).
    save_chunks = (torch.is_grad_enabled() and u.device.type == "cpu" and any(
        t is not None and t.requires_grad
        for t in (u, delta, A, B, C, D, z, delta_bias, initial_state)))
    out, last, _, varlen = _ops.selective_scan_fwd(
        _dense_last(u), _dense_last(delta), _f32(A), _dense_last(B), _dense_last(C), _f32(D),
        _dense_last(z), _f32(delta_bias), _state(initial_state), _int32(seq_idx),
        _offsets(cu_seqlens), bool(delta_softplus), algorithm, int(chunk_length), save_chunks,
        bool(return_varlen_states))
    return _returns(out, last if return_last_state else None,
                    varlen if return_varlen_states else None)


# ------------------------------------------------------------------ SSD (Mamba-2)

def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=0, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False,
                              state_dtype=None, *, algorithm="auto"):
    """mamba_ssm's mamba_chunk_scan_combined. x: (B, L, H, P); dt: (B, L, H); A: (H);
    B, C: (B, L, G, N); D: (H) or (H, P); z: (B, L, H, P); dt_bias: (H); initial_states:
    (B, H, P, N), or (S, H, P, N) with cu_seqlens; packed sequences: seq_idx (B, L) integers
    (a change starts a new sequence), cu_seqlens (S + 1) offsets with B = 1 (each sequence
    restarts from its initial state; with both, they must agree; mamba_ssm reads cu_seqlens
    only for the varlen states). chunk_size only sets speed (0 picks ours). Returns out
    (B, L, H, P), then final_states (B, H, P, N) float32 and varlen_states (S, H, P, N)
    float32 when asked for, in that order."""
    fn = "mamba_chunk_scan_combined"
    _unsupported(fn, state_dtype=(state_dtype, None))
    _shapes.algorithm_index(fn, _shapes.SSD_ALGORITHMS, algorithm)
    out, final, varlen = _ops.ssd_fwd(
        _dense_last(x), _dense_last(dt), _f32(A), _dense_last(B), _dense_last(C), _f32(D),
        _dense_last(z), _f32(dt_bias), _state(initial_states), _int32(seq_idx),
        _offsets(cu_seqlens), bool(dt_softplus), float(dt_limit[0]), float(dt_limit[1]),
        algorithm, int(chunk_size or 0), bool(return_final_states), bool(return_varlen_states))
    return _returns(out, final if return_final_states else None,
                    varlen if return_varlen_states else None)


# ------------------------------------------------------------------ decode step

def _mamba2_per_head(fn, name, t, per_head_dims):
    """mamba_ssm's Mamba-2 decode passes A (H, P, N), dt (B, H, P) and dt_bias, D (H, P) as
    stride-0 broadcasts of per-head values; the kernel takes the per-head values."""
    if t is None or t.dim() <= per_head_dims:
        return t
    extra = t.dim() - per_head_dims
    if any(t.stride(-1 - i) != 0 for i in range(extra)):
        raise NotImplementedError(
            f"{fn}: {name}: values that vary within a head (shape {tuple(t.shape)} with "
            f"strides {t.stride()}) are not supported: ssmkit takes one value per head "
            f"(a stride-0 broadcast, as mamba_ssm's Mamba2.step passes, is fine)")
    return t[(Ellipsis,) + (0,) * extra]


def _f32_inplace(state, update):
    """Runs update(float32 state) on a state of another dtype and writes the result back."""
    if state.dtype == _F32 and (state.shape[-1] <= 1 or state.stride(-1) == 1):
        return update(state)
    work = _dense_last(state.float())
    out = update(work)
    state.copy_(work)
    return out


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    """mamba_ssm's selective_state_update: one token, `state` updated in place. Mamba-1:
    state (B, D, N), x, dt, z (B, D), A (D, N), B, C (B, N) or (B, G, N), D, dt_bias (D).
    Mamba-2: state (B, H, P, N), x, z (B, H, P), dt (B, H) or mamba_ssm's (B, H, P)
    broadcast, A (H) or (H, P, N) broadcast, B, C (B, G, N), D (H) or (H, P), dt_bias (H) or
    (H, P) broadcast. Returns out, x's shape."""
    fn = "selective_state_update"
    if state.dim() == 4:
        A = _mamba2_per_head(fn, "A", A, 1)
        dt = _mamba2_per_head(fn, "dt", dt, 2)
        dt_bias = _mamba2_per_head(fn, "dt_bias", dt_bias, 1)
        if D is not None and D.dim() == 2 and D.stride(-1) == 0:
            D = D[:, 0]
    args = (_dense_last(x), dt, _f32(A), _dense_last(B), _dense_last(C), _f32(D),
            _dense_last(z), _f32(dt_bias), _int32(state_batch_indices), bool(dt_softplus))
    return _f32_inplace(state, lambda s: _ops.selective_state_update(s, *args))


# ------------------------------------------------------------------ causal conv1d

def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None):
    """causal-conv1d's causal_conv1d_fn. x: (B, D, L); weight: (D, K); bias: (D);
    initial_states: (B, D, K-1); seq_idx: (B, L) integers, packed sequences (any layout with a
    dense last dimension, where causal-conv1d needs channel-last). activation None, 'silu' or
    'swish'. Returns out, or (out, final_states (B, D, K-1) in x's dtype, written into
    final_states_out if given)."""
    fn = "causal_conv1d_fn"
    silu = _shapes.activation_is_silu(fn, activation)
    init = None if initial_states is None else _dense_last(initial_states)
    out, final = _ops.causal_conv1d_fwd(_dense_last(x), _dense_last(_f32(weight)), _f32(bias),
                                        init, _int32(seq_idx), silu, bool(return_final_states))
    if not return_final_states:
        return out
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return out, final


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """causal-conv1d's causal_conv1d_update: x (B, D) or (B, D, T) new steps; conv_state
    (B, D, S), S >= K-1, updated in place (through a float32 copy if it is not float32).
    Returns out, x's shape."""
    fn = "causal_conv1d_update"
    _unsupported(fn, cache_seqlens=(cache_seqlens, None),
                 conv_state_indices=(conv_state_indices, None))
    silu = _shapes.activation_is_silu(fn, activation)
    args = (_dense_last(_f32(weight)), _f32(bias), silu)
    return _f32_inplace(conv_state,
                        lambda s: _ops.causal_conv1d_update(_dense_last(x), s, *args))


# ------------------------------------------------------------------ RMSNorm

def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """mamba_ssm's gated rmsnorm_fn (ops/triton/layernorm_gated.py). x, z: (..., E);
    weight, bias: (E). Returns x's shape and dtype."""
    return _ops.rmsnorm_fwd(_dense_last(x), _f32(weight), _f32(bias), _dense_last(z),
                            float(eps), int(group_size or 0), bool(norm_before_gate))


def rms_norm_fn(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6,
                dropout_p=0.0, rowscale=None, prenorm=False, residual_in_fp32=False,
                return_dropout_mask=False):
    """mamba_ssm's rms_norm_fn (ops/triton/layer_norm.py): residual_out = x + residual,
    out = RMSNorm(residual_out) in x's dtype. Returns out, or (out, residual_out) when
    prenorm; residual_out is float32 when residual_in_fp32 (else residual's dtype, or x's
    without a residual), accumulated in float32 either way."""
    _unsupported("rms_norm_fn", x1=(x1, None), weight1=(weight1, None), bias1=(bias1, None),
                 dropout_p=(float(dropout_p), 0.0), rowscale=(rowscale, None),
                 return_dropout_mask=(bool(return_dropout_mask), False))
    out, residual_out = _ops.add_rmsnorm_fwd(_dense_last(x), _state(residual), _f32(weight),
                                             _f32(bias), float(eps))
    if not prenorm:
        return out
    if residual_in_fp32:
        return out, residual_out
    return out, residual_out.to(x.dtype if residual is None else residual.dtype)


# ------------------------------------------------------------------ linear

def linear(x, weight, bias=None):
    """torch.nn.functional.linear on ssmkit's kernel: x (..., K) float32, weight (M, K)
    float32, bfloat16 or float16 (read in its own dtype: a bf16 weight moves half the bytes),
    bias (M). Returns (..., M) float32. Differentiable with respect to x, a float32 weight and
    the bias."""
    rows = x.reshape(-1, x.shape[-1])
    out = _ops.linear_fwd(_dense_last(rows), weight.contiguous(), _f32(bias))
    return out.reshape(*x.shape[:-1], weight.shape[0])
