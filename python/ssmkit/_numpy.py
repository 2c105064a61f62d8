"""The ops on numpy arrays, with mamba_ssm's names and arguments.

Inputs are passed to the C++ kernels without copying when their last dimension is
contiguous (any other strides are fine); outputs are new arrays, except the decode states,
which are updated in place as in mamba_ssm. bfloat16 is ml_dtypes.bfloat16. Every argument
error raises ssmkit.InvalidArgumentError (a ValueError) with the C++ op's message.
"""
from collections import namedtuple

import ml_dtypes
import numpy as np

from . import _shapes, _ssmkit

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# The gradients each backward returns, named and ordered by the C++ library's list of the op's
# tensors (include/ssmkit/op_tensors.hpp).
SelectiveScanGrads = namedtuple("SelectiveScanGrads", _ssmkit.op_grads["selective_scan"])
SsdGrads = namedtuple("SsdGrads", _ssmkit.op_grads["ssd"])
Conv1dGrads = namedtuple("Conv1dGrads", _ssmkit.op_grads["causal_conv1d"])
RmsNormGrads = namedtuple("RmsNormGrads", _ssmkit.op_grads["rmsnorm"])
AddRmsNormGrads = namedtuple("AddRmsNormGrads", _ssmkit.op_grads["add_rmsnorm"])


def _array(a):
    """An input as a numpy array, None staying None. The kernels read any strides but need the
    last dimension dense and no negative stride: only an array that is not so is copied."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.ndim and ((a.shape[-1] > 1 and a.strides[-1] != a.itemsize) or min(a.strides) < 0):
        a = np.ascontiguousarray(a)
    return a


def _indices(a):
    """An index input (seq_idx, state_batch_indices) as int32, the dtype the kernels read."""
    if a is None:
        return None
    a = np.asarray(a)
    return a.astype(np.int32) if a.dtype.kind in "iu" and a.dtype != np.int32 else a


def _offsets(a):
    """cu_seqlens as int32 or int64 (both read as given; other integers become int64)."""
    if a is None:
        return None
    a = np.asarray(a)
    return a.astype(np.int64) if a.dtype.kind in "iu" and a.dtype not in (np.int32,
                                                                          np.int64) else a


def _varlen_states(fn, cu_seqlens, state_shape):
    """The (S, ...) array varlen_states is written into: S = len(cu_seqlens) - 1."""
    if cu_seqlens is None:
        raise ValueError(f"{fn}: return_varlen_states: expected cu_seqlens (one state per "
                         "sequence), given cu_seqlens=None")
    return np.empty(_shapes.varlen_states(np.shape(cu_seqlens), state_shape), np.float32)


def _returns(out, final, varlen):
    """mamba_ssm's return convention: out, then the final states and the varlen states that
    were asked for (None marks one that was not)."""
    extra = tuple(x for x in (final, varlen) if x is not None)
    return (out, *extra) if extra else out


def _native(a):
    """What the extension reads: bfloat16 travels as its uint16 bits (same memory)."""
    if isinstance(a, np.ndarray) and a.dtype == bfloat16:
        return a.view(np.uint16)
    return a


def _call(fn, **args):
    fn({k: _native(v) for k, v in args.items()})


def _grad_like(x):
    return None if x is None else np.empty(x.shape, x.dtype)


def _inplace(fn, name, a):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{fn}: {name}: expected a numpy array (it is updated in place), "
                        f"given {type(a).__name__}")
    return a


# ------------------------------------------------------------------ selective scan (Mamba-1)

def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, *, initial_state=None, algorithm="sequential",
                      chunk_length=0, seq_idx=None, cu_seqlens=None, return_varlen_states=False):
    """mamba_ssm's selective_scan_fn. u, delta: (B, D, L); A: (D, N); B, C: (D, N), (B, N, L)
    or (B, G, N, L); D, delta_bias: (D); z: (B, D, L). Extras: initial_state (B, D, N) f32,
    algorithm, chunk_length, and packed sequences (which mamba_ssm's Mamba-1 lacks): seq_idx
    (B, L) int, or cu_seqlens (S + 1) int with B = 1, then initial_state may be (S, D, N) and
    return_varlen_states returns each sequence's last state (S, D, N) f32. Returns out,
    (out, last_state (B, D, N) f32), (out, varlen_states) or (out, last_state,
    varlen_states)."""
    u, delta, A, B, C, D, z, delta_bias, initial_state = map(
        _array, (u, delta, A, B, C, D, z, delta_bias, initial_state))
    cu_seqlens = _offsets(cu_seqlens)
    state = _shapes.scan_state(u.shape, A.shape)
    out = np.empty(u.shape, u.dtype)
    last = np.empty(state, np.float32) if return_last_state else None
    varlen = (_varlen_states("selective_scan_fn", cu_seqlens, state)
              if return_varlen_states else None)
    _call(_ssmkit.selective_scan_fwd, u=u, delta=delta, A=A, B=B, C=C, D=D, z=z,
          delta_bias=delta_bias, initial_state=initial_state, seq_idx=_indices(seq_idx),
          cu_seqlens=cu_seqlens, delta_softplus=bool(delta_softplus), algorithm=algorithm,
          chunk_length=int(chunk_length), out=out, final_state=last, chunk_states=None,
          varlen_states=varlen)
    return _returns(out, last, varlen)


def selective_scan_bwd(dout, u, delta, A, B, C, D=None, z=None, delta_bias=None,
                       delta_softplus=False, *, initial_state=None, dlast_state=None,
                       chunk_length=0, seq_idx=None, cu_seqlens=None, dvarlen_states=None):
    """Gradients of selective_scan_fn's out (and last state, through dlast_state, and varlen
    states, through dvarlen_states) with respect to every input given: a SelectiveScanGrads,
    None where the input is None."""
    u, delta, A, B, C, D, z, delta_bias, initial_state, dout, dlast_state, dvarlen_states = map(
        _array, (u, delta, A, B, C, D, z, delta_bias, initial_state, dout, dlast_state,
                 dvarlen_states))
    grads = SelectiveScanGrads(*map(_grad_like, (u, delta, A, B, C, D, z, delta_bias,
                                                 initial_state)))
    _call(_ssmkit.selective_scan_bwd, u=u, delta=delta, A=A, B=B, C=C, D=D, z=z,
          delta_bias=delta_bias, initial_state=initial_state, seq_idx=_indices(seq_idx),
          cu_seqlens=_offsets(cu_seqlens), delta_softplus=bool(delta_softplus),
          algorithm="sequential", chunk_length=int(chunk_length), dout=dout,
          dfinal_state=dlast_state, dvarlen_states=dvarlen_states, chunk_states=None,
          **grads._asdict())
    return grads


# ------------------------------------------------------------------ SSD (Mamba-2)

def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=0, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False, *,
                              algorithm="auto"):
    """mamba_ssm's mamba_chunk_scan_combined. x: (B, L, H, P); dt: (B, L, H); A: (H);
    B, C: (B, L, G, N); D: (H) or (H, P); z: (B, L, H, P); dt_bias: (H);
    initial_states: (B, H, P, N) f32, or (S, H, P, N) with cu_seqlens; seq_idx: (B, L) int;
    cu_seqlens: (S + 1) int with B = 1 (each sequence restarts from its initial state; see
    docs/ops/ssd.md). chunk_size only sets speed (0 picks ours). Returns out, and then
    final_states (B, H, P, N) f32 and varlen_states (S, H, P, N) f32 when asked for, in
    mamba_ssm's order."""
    x, dt, A, B, C, D, z, dt_bias, initial_states = map(
        _array, (x, dt, A, B, C, D, z, dt_bias, initial_states))
    cu_seqlens = _offsets(cu_seqlens)
    state = _shapes.ssd_state(x.shape, B.shape)
    out = np.empty(x.shape, x.dtype)
    final = np.empty(state, np.float32) if return_final_states else None
    varlen = (_varlen_states("mamba_chunk_scan_combined", cu_seqlens, state)
              if return_varlen_states else None)
    _call(_ssmkit.ssd_fwd, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
          initial_states=initial_states, seq_idx=_indices(seq_idx), cu_seqlens=cu_seqlens,
          dt_softplus=bool(dt_softplus), dt_min=float(dt_limit[0]), dt_max=float(dt_limit[1]),
          algorithm=algorithm, chunk_size=int(chunk_size or 0), out=out, final_states=final,
          varlen_states=varlen)
    return _returns(out, final, varlen)


def mamba_chunk_scan_combined_bwd(dout, x, dt, A, B, C, chunk_size=0, D=None, z=None,
                                  dt_bias=None, initial_states=None, seq_idx=None,
                                  cu_seqlens=None, dt_softplus=False,
                                  dt_limit=(0.0, float("inf")), *, dfinal_states=None,
                                  dvarlen_states=None, algorithm="auto"):
    """Gradients of mamba_chunk_scan_combined (through out, and the final and varlen states by
    dfinal_states and dvarlen_states): an SsdGrads, None where the input is None."""
    x, dt, A, B, C, D, z, dt_bias, initial_states, dout, dfinal_states, dvarlen_states = map(
        _array, (x, dt, A, B, C, D, z, dt_bias, initial_states, dout, dfinal_states,
                 dvarlen_states))
    grads = SsdGrads(*map(_grad_like, (x, dt, A, B, C, D, z, dt_bias, initial_states)))
    _call(_ssmkit.ssd_bwd, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
          initial_states=initial_states, seq_idx=_indices(seq_idx),
          cu_seqlens=_offsets(cu_seqlens), dt_softplus=bool(dt_softplus),
          dt_min=float(dt_limit[0]), dt_max=float(dt_limit[1]), algorithm=algorithm,
          chunk_size=int(chunk_size or 0), dout=dout, dfinal_states=dfinal_states,
          dvarlen_states=dvarlen_states, **grads._asdict())
    return grads


# ------------------------------------------------------------------ decode step

def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    """mamba_ssm's selective_state_update: one token, `state` (a float32 numpy array)
    updated in place. Mamba-1: state (B, D, N), x, dt, z (B, D), A (D, N), B, C (B, N) or
    (B, G, N). Mamba-2: state (B, H, P, N), x, z (B, H, P), dt (B, H), A (H), B, C (B, G, N).
    Returns out, x's shape."""
    state = _inplace("selective_state_update", "state", state)
    x, dt, A, B, C, D, z, dt_bias = map(_array, (x, dt, A, B, C, D, z, dt_bias))
    out = np.empty(x.shape, x.dtype)
    _call(_ssmkit.selective_state_update, state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z,
          dt_bias=dt_bias, state_batch_indices=_indices(state_batch_indices),
          dt_softplus=bool(dt_softplus), out=out)
    return out


# ------------------------------------------------------------------ causal conv1d

def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None):
    """causal_conv1d's causal_conv1d_fn. x: (B, D, L); weight: (D, K); bias: (D);
    initial_states: (B, D, K-1); seq_idx: (B, L) int, packed sequences (any layout with a
    contiguous last dimension, where causal-conv1d needs channel-last). activation None,
    'silu' or 'swish'. Returns out, or (out, final_states (B, D, K-1))."""
    fn = "causal_conv1d_fn"
    silu = _shapes.activation_is_silu(fn, activation)
    x, weight, bias, initial_states = map(_array, (x, weight, bias, initial_states))
    out = np.empty(x.shape, x.dtype)
    final = None
    if return_final_states:
        final = (final_states_out if final_states_out is not None
                 else np.empty(_shapes.conv_state(x.shape, weight.shape), x.dtype))
    _call(_ssmkit.causal_conv1d_fwd, x=x, weight=weight, bias=bias,
          initial_states=initial_states, seq_idx=_indices(seq_idx), silu=silu, out=out,
          final_states=final)
    return (out, final) if return_final_states else out


def causal_conv1d_bwd(dout, x, weight, bias=None, initial_states=None, dfinal_states=None,
                      activation=None, seq_idx=None):
    """Gradients of causal_conv1d_fn: a Conv1dGrads, None where the input is None."""
    silu = _shapes.activation_is_silu("causal_conv1d_bwd", activation)
    x, weight, bias, initial_states, dout, dfinal_states = map(
        _array, (x, weight, bias, initial_states, dout, dfinal_states))
    grads = Conv1dGrads(*map(_grad_like, (x, weight, bias, initial_states)))
    _call(_ssmkit.causal_conv1d_bwd, x=x, weight=weight, bias=bias,
          initial_states=initial_states, seq_idx=_indices(seq_idx), silu=silu, dout=dout,
          dfinal_states=dfinal_states, **grads._asdict())
    return grads


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None,
                         cache_seqlens=None, conv_state_indices=None):
    """causal_conv1d's causal_conv1d_update: x (B, D) or (B, D, T) new steps; conv_state
    (B, D, S) float32, S >= K-1, updated in place. Returns out, x's shape."""
    fn = "causal_conv1d_update"
    _shapes.no_varlen(fn, cache_seqlens=cache_seqlens, conv_state_indices=conv_state_indices)
    silu = _shapes.activation_is_silu(fn, activation)
    conv_state = _inplace(fn, "conv_state", conv_state)
    x, weight, bias = map(_array, (x, weight, bias))
    out = np.empty(x.shape, x.dtype)
    _call(_ssmkit.causal_conv1d_update, x=x, weight=weight, bias=bias, silu=silu,
          conv_state=conv_state, out=out)
    return out


# ------------------------------------------------------------------ RMSNorm

def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """mamba_ssm's gated rmsnorm_fn (layernorm_gated.py). x, z: (..., E); weight, bias: (E)."""
    x, weight, bias, z = map(_array, (x, weight, bias, z))
    out = np.empty(x.shape, x.dtype)
    rows = _shapes.rows(x.shape)
    _call(_ssmkit.rmsnorm_fwd, x=x.reshape(rows), weight=weight, bias=bias,
          z=None if z is None else z.reshape(_shapes.rows(z.shape)), eps=float(eps),
          group_size=int(group_size or 0), norm_before_gate=bool(norm_before_gate),
          out=out.reshape(rows))
    return out


def rmsnorm_bwd(dout, x, weight, bias, z=None, eps=1e-6, group_size=None,
                norm_before_gate=True):
    """Gradients of rmsnorm_fn: an RmsNormGrads, None where the input is None."""
    x, weight, bias, z, dout = map(_array, (x, weight, bias, z, dout))
    grads = RmsNormGrads(*map(_grad_like, (x, weight, bias, z)))
    as_rows = lambda a: None if a is None else a.reshape(_shapes.rows(a.shape))  # noqa: E731
    _call(_ssmkit.rmsnorm_bwd, x=as_rows(x), weight=weight, bias=bias, z=as_rows(z),
          eps=float(eps), group_size=int(group_size or 0),
          norm_before_gate=bool(norm_before_gate), dout=as_rows(dout), dx=as_rows(grads.dx),
          dweight=grads.dweight, dbias=grads.dbias, dz=as_rows(grads.dz))
    return grads


def rms_norm_fn(x, weight, bias, residual=None, prenorm=False, residual_in_fp32=True, eps=1e-6):
    """mamba_ssm's rms_norm_fn (layer_norm.py) with a residual: residual_out = x + residual
    (float32), out = RMSNorm(residual_out). Returns out, or (out, residual_out) when prenorm."""
    x, weight, bias, residual = map(_array, (x, weight, bias, residual))
    rows = _shapes.rows(x.shape)
    out = np.empty(x.shape, x.dtype)
    residual_out = np.empty(x.shape, np.float32)
    _call(_ssmkit.add_rmsnorm_fwd, x=x.reshape(rows), weight=weight, bias=bias,
          residual=None if residual is None else residual.reshape(rows), eps=float(eps),
          out=out.reshape(rows), residual_out=residual_out.reshape(rows))
    if not prenorm:
        return out
    return out, residual_out if residual_in_fp32 else residual_out.astype(x.dtype)


def rms_norm_bwd(dout, x, weight, bias, residual=None, dresidual_out=None, eps=1e-6):
    """Gradients of rms_norm_fn: an AddRmsNormGrads (dx, dresidual, dweight, dbias)."""
    x, weight, bias, residual, dout, dresidual_out = map(
        _array, (x, weight, bias, residual, dout, dresidual_out))
    grads = AddRmsNormGrads(*map(_grad_like, (x, residual, weight, bias)))
    as_rows = lambda a: None if a is None else a.reshape(_shapes.rows(a.shape))  # noqa: E731
    _call(_ssmkit.add_rmsnorm_bwd, x=as_rows(x), residual=as_rows(residual), weight=weight,
          bias=bias, eps=float(eps), dout=as_rows(dout), dresidual_out=as_rows(dresidual_out),
          dx=as_rows(grads.dx), dresidual=as_rows(grads.dresidual), dweight=grads.dweight,
          dbias=grads.dbias)
    return grads
