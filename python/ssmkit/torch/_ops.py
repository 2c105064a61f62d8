"""The ops as torch custom operators: torch.ops.ssmkit.<name>, each with a fake (meta)
implementation for torch.compile and, for the differentiable ones, an autograd registration
whose backward is another custom op (the fused C++ backward).

Each op calls the same extension function as the numpy API (ssmkit._ssmkit, one binding
layer): the tensors travel through DLPack without copying, outputs are allocated here with
torch.empty on the inputs' device and written by the kernels. On CUDA tensors the kernels
launch on the current torch stream of that device, without waiting for it.

These ops take exactly the layouts and dtypes the kernels take; ssmkit.torch's public
functions (_functions.py) bring mamba_ssm's arguments into that form with ordinary torch ops
(casts of the small f32 parameters, a copy where a last dimension is strided), so autograd
and torch.compile see through them.

Dimension legend: B batch, L length, D channels, N state size, H heads, P head dim, G groups,
K conv width, M rows, E features.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack as _to_dlpack

from .. import _ssmkit

_LIB = "ssmkit"


# ------------------------------------------------------------------ calling the extension

def _call(fn, device, **args):
    """Runs an extension function on a dict of tensors, each handed over as a DLPack capsule
    (torch.utils.dlpack.to_dlpack: one C call per tensor, where Tensor.__dlpack__ would add a
    Python method with checks this layer does not need: a tensor that requires grad is fine,
    the autograd registrations below own the gradients; the stream is ours to pick)."""
    args = {k: _to_dlpack(v) if isinstance(v, Tensor) else v for k, v in args.items()}
    if device.type == "cuda":
        args["cuda_stream"] = torch.cuda.current_stream(device).cuda_stream
        args["cuda_device"] = device.index if device.index is not None else \
            torch.cuda.current_device()
    fn(args)


def _empty(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


def _like(x):
    return _empty(x.shape, x.dtype, x.device)


def _none_tensor(device):
    """What a list-returning op gives for a gradient it does not compute (an absent input, or
    one not wanted): custom ops cannot return None inside a list."""
    return _empty((0,), torch.float32, device)


def _grads(inputs, wanted):
    """Gradient buffers for the inputs present and wanted; None for the others."""
    return [_like(x) if x is not None and w else None for x, w in zip(inputs, wanted)]


def _grad_args(op, grads):
    """Gradient buffers as the binding's keyword arguments, under the op's gradient names
    (include/ssmkit/op_tensors.hpp), in order."""
    return dict(zip(_ssmkit.op_grads[op], grads))


def _grad_list(grads, device):
    return [g if g is not None else _none_tensor(device) for g in grads]


def _fake_grad_list(inputs, wanted, device):
    return [_like(x) if x is not None and w else _none_tensor(device)
            for x, w in zip(inputs, wanted)]


def _as_input_grads(grads, inputs, wanted):
    """The autograd backward's return values: None where no gradient was computed."""
    return [g if x is not None and w else None for g, x, w in zip(grads, inputs, wanted)]


def _grad_or_zeros(g, like):
    return torch.zeros_like(like) if g is None else g


def _dense_last(t):
    """An incoming gradient with its last dimension dense (autograd may hand an expanded one)."""
    if t is not None and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    return t


# ------------------------------------------------------------------ selective scan (Mamba-1)

def scan_chunk_count(seqlen, chunk_length):
    q = chunk_length if chunk_length > 0 else _ssmkit.scan_default_chunk_length
    return (seqlen + q - 1) // q


def _varlen_shape(cu_seqlens, state_shape, wanted):
    """(S, ...) of the per-sequence states (S = len(cu_seqlens) - 1), or (0,) when not wanted
    (custom ops return tensors only; the wrappers drop it). Without cu_seqlens the op rejects
    the call; the fake then gives (0,)."""
    if not wanted or cu_seqlens is None:
        return (0,)
    return (cu_seqlens.shape[0] - 1, *state_shape[1:])


def _scan_outputs(u, A, cu_seqlens, save_chunks, chunk_length, return_varlen_states):
    batch, dim, seqlen = u.shape[0], u.shape[1], u.shape[-1]
    state = (batch, dim, A.shape[-1])
    chunks = (batch, dim, scan_chunk_count(seqlen, chunk_length), state[-1]) if save_chunks \
        else (0,)
    return (_like(u), _empty(state, torch.float32, u.device),
            _empty(chunks, torch.float32, u.device),
            _empty(_varlen_shape(cu_seqlens, state, return_varlen_states), torch.float32,
                   u.device))


@torch.library.custom_op(f"{_LIB}::selective_scan_fwd", mutates_args=())
def selective_scan_fwd(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                       D: Optional[Tensor], z: Optional[Tensor], delta_bias: Optional[Tensor],
                       initial_state: Optional[Tensor], seq_idx: Optional[Tensor],
                       cu_seqlens: Optional[Tensor], delta_softplus: bool, algorithm: str,
                       chunk_length: int, save_chunks: bool,
                       return_varlen_states: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """u, delta, z: (B, D, L); A: (D, N) f32; B, C: (D, N), (B, N, L) or (B, G, N, L); D,
    delta_bias: (D) f32; initial_state: (B, D, N) f32, or (S, D, N) with cu_seqlens; packed
    sequences: seq_idx (B, L) i32, cu_seqlens (S + 1) i32 | i64 with B = 1. Returns out
    (B, D, L), the last state (B, D, N) f32, when save_chunks the chunk states
    (B, D, ceil(L / Q), N) f32 that the backward reads instead of rerunning the scan, and when
    return_varlen_states each sequence's last state (S, D, N) f32 (each a (0,) tensor when not
    asked for)."""
    out, last, chunks, varlen = _scan_outputs(u, A, cu_seqlens, save_chunks, chunk_length,
                                              return_varlen_states)
    _call(_ssmkit.selective_scan_fwd, u.device, u=u, delta=delta, A=A, B=B, C=C, D=D, z=z,
          delta_bias=delta_bias, initial_state=initial_state, seq_idx=seq_idx,
          cu_seqlens=cu_seqlens, delta_softplus=delta_softplus, algorithm=algorithm,
          chunk_length=chunk_length, out=out, final_state=last,
          chunk_states=chunks if save_chunks else None,
          varlen_states=varlen if return_varlen_states else None)
    return out, last, chunks, varlen


@selective_scan_fwd.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx, cu_seqlens, delta_softplus,
      algorithm, chunk_length, save_chunks, return_varlen_states):
    return _scan_outputs(u, A, cu_seqlens, save_chunks, chunk_length, return_varlen_states)


@torch.library.custom_op(f"{_LIB}::selective_scan_bwd", mutates_args=())
def selective_scan_bwd(dout: Tensor, dlast_state: Optional[Tensor],
                       dvarlen_states: Optional[Tensor], u: Tensor, delta: Tensor, A: Tensor,
                       B: Tensor, C: Tensor, D: Optional[Tensor], z: Optional[Tensor],
                       delta_bias: Optional[Tensor], initial_state: Optional[Tensor],
                       seq_idx: Optional[Tensor], cu_seqlens: Optional[Tensor],
                       chunk_states: Optional[Tensor], delta_softplus: bool, chunk_length: int,
                       wanted: List[bool]) -> List[Tensor]:
    """Gradients of selective_scan_fwd's out, last state and varlen states with respect to
    (u, delta, A, B, C, D, z, delta_bias, initial_state), each in its input's shape and dtype;
    a (0,) tensor for an input absent or not `wanted`."""
    inputs = (u, delta, A, B, C, D, z, delta_bias, initial_state)
    g = _grads(inputs, wanted)
    _call(_ssmkit.selective_scan_bwd, u.device, u=u, delta=delta, A=A, B=B, C=C, D=D, z=z,
          delta_bias=delta_bias, initial_state=initial_state, seq_idx=seq_idx,
          cu_seqlens=cu_seqlens, delta_softplus=delta_softplus, algorithm="sequential",
          chunk_length=chunk_length, dout=dout, dfinal_state=dlast_state,
          dvarlen_states=dvarlen_states, chunk_states=chunk_states,
          **_grad_args("selective_scan", g))
    return _grad_list(g, u.device)


@selective_scan_bwd.register_fake
def _(dout, dlast_state, dvarlen_states, u, delta, A, B, C, D, z, delta_bias, initial_state,
      seq_idx, cu_seqlens, chunk_states, delta_softplus, chunk_length, wanted):
    return _fake_grad_list((u, delta, A, B, C, D, z, delta_bias, initial_state), wanted,
                           u.device)


def _scan_setup(ctx, inputs, output):
    (u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx, cu_seqlens, delta_softplus,
     _, chunk_length, save_chunks, return_varlen_states) = inputs
    chunks = output[2] if save_chunks else None
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx,
                          cu_seqlens, chunks)
    ctx.delta_softplus, ctx.chunk_length = delta_softplus, chunk_length
    ctx.return_varlen_states = return_varlen_states


def _scan_backward(ctx, dout, dlast_state, _, dvarlen_states):
    saved = ctx.saved_tensors
    inputs, packing, chunks = saved[:9], saved[9:11], saved[11]
    wanted = list(ctx.needs_input_grad[:9])
    dvarlen = _dense_last(dvarlen_states) if ctx.return_varlen_states else None
    grads = torch.ops.ssmkit.selective_scan_bwd(
        _dense_last(_grad_or_zeros(dout, inputs[0])), _dense_last(dlast_state), dvarlen,
        *inputs, *packing, chunks, ctx.delta_softplus, ctx.chunk_length, wanted)
    return (*_as_input_grads(grads, inputs, wanted), *[None] * 7)


selective_scan_fwd.register_autograd(_scan_backward, setup_context=_scan_setup)


# ------------------------------------------------------------------ SSD (Mamba-2)

def _ssd_outputs(x, B, cu_seqlens, return_final_states, return_varlen_states):
    state = (x.shape[0], x.shape[2], x.shape[3], B.shape[-1])
    return (_like(x), _empty(state if return_final_states else (0,), torch.float32, x.device),
            _empty(_varlen_shape(cu_seqlens, state, return_varlen_states), torch.float32,
                   x.device))


@torch.library.custom_op(f"{_LIB}::ssd_fwd", mutates_args=())
def ssd_fwd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor],
            z: Optional[Tensor], dt_bias: Optional[Tensor], initial_states: Optional[Tensor],
            seq_idx: Optional[Tensor], cu_seqlens: Optional[Tensor], dt_softplus: bool,
            dt_min: float, dt_max: float, algorithm: str, chunk_size: int,
            return_final_states: bool,
            return_varlen_states: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """x, z: (B, L, H, P); dt: (B, L, H); A, dt_bias: (H) f32; B, C: (B, L, G, N); D: (H) or
    (H, P) f32; initial_states: (B, H, P, N) f32, or (S, H, P, N) with cu_seqlens; packed
    sequences: seq_idx (B, L) i32, cu_seqlens (S + 1) i32 | i64 with B = 1. Returns out
    (B, L, H, P), the final states (B, H, P, N) f32 and each sequence's last state
    (S, H, P, N) f32 (each a (0,) tensor unless asked for)."""
    out, final, varlen = _ssd_outputs(x, B, cu_seqlens, return_final_states,
                                      return_varlen_states)
    _call(_ssmkit.ssd_fwd, x.device, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
          initial_states=initial_states, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
          dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, algorithm=algorithm,
          chunk_size=chunk_size, out=out, final_states=final if return_final_states else None,
          varlen_states=varlen if return_varlen_states else None)
    return out, final, varlen


@ssd_fwd.register_fake
def _(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_min,
      dt_max, algorithm, chunk_size, return_final_states, return_varlen_states):
    return _ssd_outputs(x, B, cu_seqlens, return_final_states, return_varlen_states)


@torch.library.custom_op(f"{_LIB}::ssd_bwd", mutates_args=())
def ssd_bwd(dout: Tensor, dfinal_states: Optional[Tensor], dvarlen_states: Optional[Tensor],
            x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor],
            z: Optional[Tensor], dt_bias: Optional[Tensor], initial_states: Optional[Tensor],
            seq_idx: Optional[Tensor], cu_seqlens: Optional[Tensor], dt_softplus: bool,
            dt_min: float, dt_max: float, algorithm: str, chunk_size: int,
            wanted: List[bool]) -> List[Tensor]:
    """Gradients of ssd_fwd with respect to (x, dt, A, B, C, D, z, dt_bias, initial_states)."""
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    g = _grads(inputs, wanted)
    _call(_ssmkit.ssd_bwd, x.device, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
          initial_states=initial_states, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
          dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, algorithm=algorithm,
          chunk_size=chunk_size, dout=dout, dfinal_states=dfinal_states,
          dvarlen_states=dvarlen_states, **_grad_args("ssd", g))
    return _grad_list(g, x.device)


@ssd_bwd.register_fake
def _(dout, dfinal_states, dvarlen_states, x, dt, A, B, C, D, z, dt_bias, initial_states,
      seq_idx, cu_seqlens, dt_softplus, dt_min, dt_max, algorithm, chunk_size, wanted):
    return _fake_grad_list((x, dt, A, B, C, D, z, dt_bias, initial_states), wanted, x.device)


def _ssd_setup(ctx, inputs, output):
    (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_min,
     dt_max, algorithm, chunk_size, return_final_states, return_varlen_states) = inputs
    ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens)
    ctx.options = (dt_softplus, dt_min, dt_max, algorithm, chunk_size)
    ctx.return_states = (return_final_states, return_varlen_states)


def _ssd_backward(ctx, dout, dfinal_states, dvarlen_states):
    saved = ctx.saved_tensors
    inputs, packing = saved[:9], saved[9:]
    wanted = list(ctx.needs_input_grad[:9])
    dstates = [_dense_last(d) if asked else None
               for d, asked in zip((dfinal_states, dvarlen_states), ctx.return_states)]
    grads = torch.ops.ssmkit.ssd_bwd(_dense_last(_grad_or_zeros(dout, inputs[0])), *dstates,
                                     *inputs, *packing, *ctx.options, wanted)
    return (*_as_input_grads(grads, inputs, wanted), *[None] * 9)


ssd_fwd.register_autograd(_ssd_backward, setup_context=_ssd_setup)


# ------------------------------------------------------------------ decode step

@torch.library.custom_op(f"{_LIB}::selective_state_update", mutates_args=("state",))
def selective_state_update(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor,
                           C: Tensor, D: Optional[Tensor], z: Optional[Tensor],
                           dt_bias: Optional[Tensor], state_batch_indices: Optional[Tensor],
                           dt_softplus: bool) -> Tensor:
    """One token; state (B, D, N) or (B, H, P, N) f32 updated in place. Mamba-1: x, dt, z
    (B, D), A (D, N), B, C (B, N) or (B, G, N). Mamba-2: x, z (B, H, P), dt (B, H), A (H),
    B, C (B, G, N), D (H) or (H, P). Returns out, x's shape."""
    out = _like(x)
    _call(_ssmkit.selective_state_update, x.device, state=state, x=x, dt=dt, A=A, B=B, C=C,
          D=D, z=z, dt_bias=dt_bias, state_batch_indices=state_batch_indices,
          dt_softplus=dt_softplus, out=out)
    return out


@selective_state_update.register_fake
def _(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dt_softplus):
    return _like(x)


# ------------------------------------------------------------------ causal conv1d

def _conv_outputs(x, weight, return_final_states):
    final = ((x.shape[0], x.shape[1], weight.shape[-1] - 1) if return_final_states else (0,))
    return _like(x), _empty(final, x.dtype, x.device)


@torch.library.custom_op(f"{_LIB}::causal_conv1d_fwd", mutates_args=())
def causal_conv1d_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor],
                      initial_states: Optional[Tensor], seq_idx: Optional[Tensor], silu: bool,
                      return_final_states: bool) -> Tuple[Tensor, Tensor]:
    """x: (B, D, L); weight: (D, K) f32; bias: (D) f32; initial_states: (B, D, K-1); seq_idx
    (B, L) i32: packed sequences (the window does not reach back into the previous one).
    Returns out (B, D, L) and the final states (B, D, K-1) in x's dtype (a (0,) tensor unless
    asked for)."""
    out, final = _conv_outputs(x, weight, return_final_states)
    _call(_ssmkit.causal_conv1d_fwd, x.device, x=x, weight=weight, bias=bias,
          initial_states=initial_states, seq_idx=seq_idx, silu=silu, out=out,
          final_states=final if return_final_states else None)
    return out, final


@causal_conv1d_fwd.register_fake
def _(x, weight, bias, initial_states, seq_idx, silu, return_final_states):
    return _conv_outputs(x, weight, return_final_states)


@torch.library.custom_op(f"{_LIB}::causal_conv1d_bwd", mutates_args=())
def causal_conv1d_bwd(dout: Tensor, dfinal_states: Optional[Tensor], x: Tensor, weight: Tensor,
                      bias: Optional[Tensor], initial_states: Optional[Tensor],
                      seq_idx: Optional[Tensor], silu: bool, wanted: List[bool]) -> List[Tensor]:
    """Gradients of causal_conv1d_fwd with respect to (x, weight, bias, initial_states)."""
    inputs = (x, weight, bias, initial_states)
    g = _grads(inputs, wanted)
    _call(_ssmkit.causal_conv1d_bwd, x.device, x=x, weight=weight, bias=bias,
          initial_states=initial_states, seq_idx=seq_idx, silu=silu, dout=dout,
          dfinal_states=dfinal_states, **_grad_args("causal_conv1d", g))
    return _grad_list(g, x.device)


@causal_conv1d_bwd.register_fake
def _(dout, dfinal_states, x, weight, bias, initial_states, seq_idx, silu, wanted):
    return _fake_grad_list((x, weight, bias, initial_states), wanted, x.device)


def _conv_setup(ctx, inputs, output):
    x, weight, bias, initial_states, seq_idx, silu, return_final_states = inputs
    ctx.save_for_backward(x, weight, bias, initial_states, seq_idx)
    ctx.silu, ctx.return_final_states = silu, return_final_states


def _conv_backward(ctx, dout, dfinal_states):
    saved = ctx.saved_tensors
    inputs, seq_idx = saved[:4], saved[4]
    wanted = list(ctx.needs_input_grad[:4])
    dfinal = _dense_last(dfinal_states) if ctx.return_final_states else None
    grads = torch.ops.ssmkit.causal_conv1d_bwd(_dense_last(_grad_or_zeros(dout, inputs[0])),
                                               dfinal, *inputs, seq_idx, ctx.silu, wanted)
    return (*_as_input_grads(grads, inputs, wanted), None, None, None)


causal_conv1d_fwd.register_autograd(_conv_backward, setup_context=_conv_setup)


@torch.library.custom_op(f"{_LIB}::causal_conv1d_update", mutates_args=("conv_state",))
def causal_conv1d_update(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Optional[Tensor],
                         silu: bool) -> Tensor:
    """x: (B, D) or (B, D, T); conv_state: (B, D, S) f32, S >= K-1, updated in place;
    weight: (D, K) f32; bias: (D) f32. Returns out, x's shape."""
    out = _like(x)
    _call(_ssmkit.causal_conv1d_update, x.device, x=x, weight=weight, bias=bias, silu=silu,
          conv_state=conv_state, out=out)
    return out


@causal_conv1d_update.register_fake
def _(x, conv_state, weight, bias, silu):
    return _like(x)


# ------------------------------------------------------------------ RMSNorm

def _rows(t):
    """(M, E) view (or copy) of an (..., E) tensor."""
    return None if t is None else t.reshape(-1, t.shape[-1])


@torch.library.custom_op(f"{_LIB}::rmsnorm_fwd", mutates_args=())
def rmsnorm_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor], z: Optional[Tensor],
                eps: float, group_size: int, norm_before_gate: bool) -> Tensor:
    """The gated RMSNorm. x, z: (..., E); weight, bias: (E) f32. Returns out, x's shape."""
    out = _like(x)
    _call(_ssmkit.rmsnorm_fwd, x.device, x=_rows(x), weight=weight, bias=bias, z=_rows(z),
          eps=eps, group_size=group_size, norm_before_gate=norm_before_gate, out=_rows(out))
    return out


@rmsnorm_fwd.register_fake
def _(x, weight, bias, z, eps, group_size, norm_before_gate):
    return _like(x)


@torch.library.custom_op(f"{_LIB}::rmsnorm_bwd", mutates_args=())
def rmsnorm_bwd(dout: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
                z: Optional[Tensor], eps: float, group_size: int, norm_before_gate: bool,
                wanted: List[bool]) -> List[Tensor]:
    """Gradients of rmsnorm_fwd with respect to (x, weight, bias, z)."""
    inputs = (x, weight, bias, z)
    g = _grads(inputs, wanted)
    _call(_ssmkit.rmsnorm_bwd, x.device, x=_rows(x), weight=weight, bias=bias, z=_rows(z),
          eps=eps, group_size=group_size, norm_before_gate=norm_before_gate, dout=_rows(dout),
          dx=_rows(g[0]), dweight=g[1], dbias=g[2], dz=_rows(g[3]))
    return _grad_list(g, x.device)


@rmsnorm_bwd.register_fake
def _(dout, x, weight, bias, z, eps, group_size, norm_before_gate, wanted):
    return _fake_grad_list((x, weight, bias, z), wanted, x.device)


def _rmsnorm_setup(ctx, inputs, output):
    x, weight, bias, z, eps, group_size, norm_before_gate = inputs
    ctx.save_for_backward(x, weight, bias, z)
    ctx.options = (eps, group_size, norm_before_gate)


def _rmsnorm_backward(ctx, dout):
    inputs = ctx.saved_tensors
    wanted = list(ctx.needs_input_grad[:4])
    grads = torch.ops.ssmkit.rmsnorm_bwd(_dense_last(_grad_or_zeros(dout, inputs[0])), *inputs,
                                         *ctx.options, wanted)
    return (*_as_input_grads(grads, inputs, wanted), None, None, None)


rmsnorm_fwd.register_autograd(_rmsnorm_backward, setup_context=_rmsnorm_setup)


@torch.library.custom_op(f"{_LIB}::add_rmsnorm_fwd", mutates_args=())
def add_rmsnorm_fwd(x: Tensor, residual: Optional[Tensor], weight: Tensor,
                    bias: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    """Residual add + RMSNorm. x: (..., E); residual: (..., E) f32; weight, bias: (E) f32.
    Returns out (x's shape and dtype) and residual_out = x + residual (f32)."""
    out, residual_out = _like(x), _empty(x.shape, torch.float32, x.device)
    _call(_ssmkit.add_rmsnorm_fwd, x.device, x=_rows(x), residual=_rows(residual),
          weight=weight, bias=bias, eps=eps, out=_rows(out), residual_out=_rows(residual_out))
    return out, residual_out


@add_rmsnorm_fwd.register_fake
def _(x, residual, weight, bias, eps):
    return _like(x), _empty(x.shape, torch.float32, x.device)


@torch.library.custom_op(f"{_LIB}::add_rmsnorm_bwd", mutates_args=())
def add_rmsnorm_bwd(dout: Tensor, dresidual_out: Optional[Tensor], x: Tensor,
                    residual: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                    eps: float, wanted: List[bool]) -> List[Tensor]:
    """Gradients of add_rmsnorm_fwd with respect to (x, residual, weight, bias)."""
    inputs = (x, residual, weight, bias)
    g = _grads(inputs, wanted)
    _call(_ssmkit.add_rmsnorm_bwd, x.device, x=_rows(x), residual=_rows(residual),
          weight=weight, bias=bias, eps=eps, dout=_rows(dout),
          dresidual_out=_rows(dresidual_out), dx=_rows(g[0]), dresidual=_rows(g[1]),
          dweight=g[2], dbias=g[3])
    return _grad_list(g, x.device)


@add_rmsnorm_bwd.register_fake
def _(dout, dresidual_out, x, residual, weight, bias, eps, wanted):
    return _fake_grad_list((x, residual, weight, bias), wanted, x.device)


def _add_rmsnorm_setup(ctx, inputs, output):
    x, residual, weight, bias, eps = inputs
    ctx.save_for_backward(x, residual, weight, bias)
    ctx.eps = eps


def _add_rmsnorm_backward(ctx, dout, dresidual_out):
    inputs = ctx.saved_tensors
    wanted = list(ctx.needs_input_grad[:4])
    grads = torch.ops.ssmkit.add_rmsnorm_bwd(_dense_last(_grad_or_zeros(dout, inputs[0])),
                                             _dense_last(dresidual_out), *inputs, ctx.eps,
                                             wanted)
    return (*_as_input_grads(grads, inputs, wanted), None)


add_rmsnorm_fwd.register_autograd(_add_rmsnorm_backward, setup_context=_add_rmsnorm_setup)


# ------------------------------------------------------------------ linear

@torch.library.custom_op(f"{_LIB}::linear_fwd", mutates_args=())
def linear_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """F.linear on the CPU kernel: x (T, K) f32, weight (M, K) f32 | bf16 | f16 contiguous,
    bias (M) f32. Returns out (T, M) f32. Up to _ssmkit.linear_gemv_max_rows rows the weight
    is read once for all of them (decode)."""
    out = _empty((x.shape[0], weight.shape[0]), torch.float32, x.device)
    _call(_ssmkit.linear_fwd, x.device, x=x, weight=weight, bias=bias, out=out)
    return out


@linear_fwd.register_fake
def _(x, weight, bias):
    return _empty((x.shape[0], weight.shape[0]), torch.float32, x.device)


@torch.library.custom_op(f"{_LIB}::linear_bwd", mutates_args=())
def linear_bwd(dout: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
               wanted: List[bool]) -> List[Tensor]:
    """Gradients of linear_fwd with respect to (x, weight, bias); the weight must be f32."""
    inputs = (x, weight, bias)
    g = _grads(inputs, wanted)
    _call(_ssmkit.linear_bwd, x.device, x=x, weight=weight, bias=bias, dout=dout,
          **_grad_args("linear", g))
    return _grad_list(g, x.device)


@linear_bwd.register_fake
def _(dout, x, weight, bias, wanted):
    return _fake_grad_list((x, weight, bias), wanted, x.device)


def _linear_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _linear_backward(ctx, dout):
    inputs = ctx.saved_tensors
    wanted = list(ctx.needs_input_grad[:3])
    grads = torch.ops.ssmkit.linear_bwd(dout.contiguous(), *inputs, wanted)
    return tuple(_as_input_grads(grads, inputs, wanted))


linear_fwd.register_autograd(_linear_backward, setup_context=_linear_setup)
