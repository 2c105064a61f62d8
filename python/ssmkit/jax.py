"""ssmkit's ops for JAX: XLA FFI custom calls (CPU, and CUDA when ssmkit was built with its
CUDA backend) with jax.custom_vjp gradients.

Same names and arguments as the numpy functions in `ssmkit` (mamba_ssm's), on jax arrays;
each works under jax.jit, jax.grad, jax.vmap and shard_map. The decode steps
(selective_state_update, causal_conv1d_update) are functional here: they return the updated
state instead of writing it, and have no gradient (mamba_ssm has none either).

On the CPU, handlers run the ops' parallel loops on XLA's own intra-op thread pool; on a GPU
they launch the CUDA kernels on XLA's stream for the computation. Argument errors are the
C++ ops' messages, raised when the call executes (under jit: at the first run).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import _shapes, _ssmkit

if not _ssmkit.has_xla_ffi:
    raise ImportError("ssmkit was built without jaxlib's XLA FFI headers, so ssmkit.jax is "
                      "unavailable: reinstall with jaxlib importable at build time "
                      "(SSMKIT_JAX=1 pip install ./python[jax], or pip install jax, then "
                      "pip install --no-build-isolation ./python)")

for _name, _capsule in _ssmkit.ffi_targets().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

# The same names for GPU arrays: the CUDA handlers, when the library has the CUDA backend.
# jax keeps a registration for a platform it has no backend for (a CPU-only jaxlib) unused.
if _ssmkit.built_with_cuda:
    for _name, _capsule in _ssmkit.cuda_ffi_targets().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")

_F32 = jnp.float32


def _operand(x):
    """An absent optional operand travels as a (0,) array: no elements means absent."""
    return jnp.zeros((0,), _F32) if x is None else jnp.asarray(x)


def _result(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _absent():
    return jax.ShapeDtypeStruct((0,), _F32)


def _grad_results(inputs):
    return [_absent() if x is None else _result(jnp.shape(x), jnp.asarray(x).dtype)
            for x in inputs]


def _call(target, operands, results, **attrs):
    """Runs an FFI target. `ranks` tells the handler each operand's and result's own rank: the
    leading dims beyond it are vmap's (vmap_method="expand_dims")."""
    operands = [_operand(x) for x in operands]
    ranks = np.array([x.ndim for x in operands] + [len(r.shape) for r in results], np.int64)
    return jax.ffi.ffi_call(target, results, vmap_method="expand_dims")(
        *operands, ranks=ranks, **attrs)


def _present(inputs, grads):
    """The cotangents custom_vjp wants: None for an absent input."""
    return tuple(None if x is None else g for x, g in zip(inputs, grads))


# ------------------------------------------------------------------ selective scan (Mamba-1)

def _varlen_result(cu_seqlens, state_shape):
    """varlen_states' result: (S, ...) with cu_seqlens, else absent."""
    if cu_seqlens is None:
        return _absent()
    return _result(_shapes.varlen_states(jnp.shape(cu_seqlens), state_shape), _F32)


def _offsets(cu_seqlens):
    """cu_seqlens as int32 (or int64 where jax has 64-bit integers on)."""
    if cu_seqlens is None:
        return None
    cu_seqlens = jnp.asarray(cu_seqlens)
    return cu_seqlens if cu_seqlens.dtype in (jnp.int32, jnp.int64) else cu_seqlens.astype(
        jnp.int32)


def _scan_fwd_call(inputs, delta_softplus, algorithm, chunk_length):
    u, A = inputs[0], inputs[2]
    state = _shapes.scan_state(u.shape, A.shape)
    return _call("ssmkit_selective_scan_fwd", inputs,
                 [_result(u.shape, u.dtype), _result(state, _F32),
                  _varlen_result(inputs[10], state)],
                 delta_softplus=bool(delta_softplus), algorithm=np.int64(algorithm),
                 chunk_length=np.int64(chunk_length))


# The differentiable inputs come first; seq_idx and cu_seqlens (integers) have no gradient.
@functools.partial(jax.custom_vjp, nondiff_argnums=(11, 12, 13))
def _selective_scan(u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx, cu_seqlens,
                    delta_softplus, algorithm, chunk_length):
    inputs = (u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx, cu_seqlens)
    return tuple(_scan_fwd_call(inputs, delta_softplus, algorithm, chunk_length))


def _selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx, cu_seqlens,
                        delta_softplus, algorithm, chunk_length):
    inputs = (u, delta, A, B, C, D, z, delta_bias, initial_state, seq_idx, cu_seqlens)
    return tuple(_scan_fwd_call(inputs, delta_softplus, algorithm, chunk_length)), inputs


def _selective_scan_bwd(delta_softplus, algorithm, chunk_length, inputs, cotangents):
    dout, dlast, dvarlen = cotangents
    differentiable = inputs[:9]
    grads = _call("ssmkit_selective_scan_bwd", (*inputs, dout, dlast, dvarlen),
                  _grad_results(differentiable), delta_softplus=bool(delta_softplus),
                  chunk_length=np.int64(chunk_length))
    return _present(differentiable, grads) + (None, None)


_selective_scan.defvjp(_selective_scan_fwd, _selective_scan_bwd)


def _returns(out, final, varlen, return_final, return_varlen):
    """mamba_ssm's return convention: out, then what was asked for of final and varlen."""
    extra = ((final,) if return_final else ()) + ((varlen,) if return_varlen else ())
    return (out, *extra) if extra else out


def _varlen_needs_cu_seqlens(fn, cu_seqlens, return_varlen_states):
    if return_varlen_states and cu_seqlens is None:
        raise ValueError(f"{fn}: return_varlen_states: expected cu_seqlens (one state per "
                         "sequence), given cu_seqlens=None")


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, *, initial_state=None, algorithm="sequential",
                      chunk_length=0, seq_idx=None, cu_seqlens=None, return_varlen_states=False):
    """mamba_ssm's selective_scan_fn (see ssmkit.selective_scan_fn, packed sequences
    included), differentiable in every float argument, through the last and varlen states."""
    fn = "selective_scan_fn"
    index = _shapes.algorithm_index(fn, _shapes.SCAN_ALGORITHMS, algorithm)
    _varlen_needs_cu_seqlens(fn, cu_seqlens, return_varlen_states)
    if seq_idx is not None:
        seq_idx = jnp.asarray(seq_idx, jnp.int32)
    out, last, varlen = _selective_scan(u, delta, A, B, C, D, z, delta_bias, initial_state,
                                        seq_idx, _offsets(cu_seqlens), bool(delta_softplus),
                                        index, int(chunk_length))
    return _returns(out, last, varlen, return_last_state, return_varlen_states)


# ------------------------------------------------------------------ SSD (Mamba-2)

def _ssd_attrs(dt_softplus, dt_limit, algorithm, chunk_size):
    return dict(dt_softplus=bool(dt_softplus), dt_min=np.float32(dt_limit[0]),
                dt_max=np.float32(dt_limit[1]), algorithm=np.int64(algorithm),
                chunk_size=np.int64(chunk_size))


def _ssd_fwd_call(inputs, attrs):
    x, B = inputs[0], inputs[3]
    state = _shapes.ssd_state(x.shape, B.shape)
    return tuple(_call("ssmkit_ssd_fwd", inputs,
                       [_result(x.shape, x.dtype), _result(state, _F32),
                        _varlen_result(inputs[10], state)], **attrs))


@functools.partial(jax.custom_vjp, nondiff_argnums=(11, 12, 13, 14))
def _ssd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
         dt_limit, algorithm, chunk_size):
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens)
    return _ssd_fwd_call(inputs, _ssd_attrs(dt_softplus, dt_limit, algorithm, chunk_size))


def _ssd_fwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
             dt_limit, algorithm, chunk_size):
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens)
    attrs = _ssd_attrs(dt_softplus, dt_limit, algorithm, chunk_size)
    return _ssd_fwd_call(inputs, attrs), inputs


def _ssd_bwd(dt_softplus, dt_limit, algorithm, chunk_size, inputs, cotangents):
    dout, dfinal, dvarlen = cotangents
    differentiable = inputs[:9]
    grads = _call("ssmkit_ssd_bwd", (*inputs, dout, dfinal, dvarlen),
                  _grad_results(differentiable),
                  **_ssd_attrs(dt_softplus, dt_limit, algorithm, chunk_size))
    # seq_idx, cu_seqlens: integers, no gradient
    return _present(differentiable, grads) + (None, None)


_ssd.defvjp(_ssd_fwd, _ssd_bwd)


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=0, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False, *,
                              algorithm="auto"):
    """mamba_ssm's mamba_chunk_scan_combined (see ssmkit.mamba_chunk_scan_combined),
    differentiable in every float argument, through the final and varlen states too."""
    fn = "mamba_chunk_scan_combined"
    index = _shapes.algorithm_index(fn, _shapes.SSD_ALGORITHMS, algorithm)
    _varlen_needs_cu_seqlens(fn, cu_seqlens, return_varlen_states)
    if seq_idx is not None:
        seq_idx = jnp.asarray(seq_idx, jnp.int32)
    out, final, varlen = _ssd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
                              _offsets(cu_seqlens), bool(dt_softplus),
                              (float(dt_limit[0]), float(dt_limit[1])), index,
                              int(chunk_size or 0))
    return _returns(out, final, varlen, return_final_states, return_varlen_states)


# ------------------------------------------------------------------ decode steps (no gradient)

def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    """mamba_ssm's selective_state_update, functional: returns (out, new_state)."""
    state, x = jnp.asarray(state), jnp.asarray(x)
    if state_batch_indices is not None:
        state_batch_indices = jnp.asarray(state_batch_indices, jnp.int32)
    out, new_state = _call("ssmkit_selective_state_update",
                           (state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices),
                           [_result(x.shape, x.dtype), _result(state.shape, state.dtype)],
                           dt_softplus=bool(dt_softplus))
    return out, new_state


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """causal_conv1d's causal_conv1d_update, functional: returns (out, new_conv_state)."""
    fn = "causal_conv1d_update"
    _shapes.no_varlen(fn, cache_seqlens=cache_seqlens, conv_state_indices=conv_state_indices)
    silu = _shapes.activation_is_silu(fn, activation)
    x, conv_state = jnp.asarray(x), jnp.asarray(conv_state)
    out, new_state = _call("ssmkit_causal_conv1d_update", (conv_state, x, weight, bias),
                           [_result(x.shape, x.dtype),
                            _result(conv_state.shape, conv_state.dtype)], silu=silu)
    return out, new_state


# ------------------------------------------------------------------ causal conv1d

def _conv_fwd_call(inputs, silu):
    x, weight = inputs[0], inputs[1]
    return tuple(_call("ssmkit_causal_conv1d_fwd", inputs,
                       [_result(x.shape, x.dtype),
                        _result(_shapes.conv_state(x.shape, jnp.shape(weight)), x.dtype)],
                       silu=silu))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _conv1d(x, weight, bias, initial_states, seq_idx, silu):
    return _conv_fwd_call((x, weight, bias, initial_states, seq_idx), silu)


def _conv1d_fwd(x, weight, bias, initial_states, seq_idx, silu):
    inputs = (x, weight, bias, initial_states, seq_idx)
    return _conv_fwd_call(inputs, silu), inputs


def _conv1d_bwd(silu, inputs, cotangents):
    dout, dfinal = cotangents
    differentiable = inputs[:4]
    grads = _call("ssmkit_causal_conv1d_bwd", (*inputs, dout, dfinal),
                  _grad_results(differentiable), silu=silu)
    return _present(differentiable, grads) + (None,)  # seq_idx: integers, no gradient


_conv1d.defvjp(_conv1d_fwd, _conv1d_bwd)


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None):
    """causal_conv1d's causal_conv1d_fn (see ssmkit.causal_conv1d_fn), differentiable in x,
    weight, bias, initial_states and through the final states."""
    fn = "causal_conv1d_fn"
    _shapes.no_varlen(fn, final_states_out=final_states_out)
    x = jnp.asarray(x)
    if seq_idx is not None:
        seq_idx = jnp.asarray(seq_idx, jnp.int32)
    out, final = _conv1d(x, weight, bias, initial_states, seq_idx,
                         _shapes.activation_is_silu(fn, activation))
    return (out, final) if return_final_states else out


# ------------------------------------------------------------------ RMSNorm

def _norm_attrs(eps, group_size, norm_before_gate):
    return dict(eps=np.float32(eps), group_size=np.int64(group_size),
                norm_before_gate=bool(norm_before_gate))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _rmsnorm(x, weight, bias, z, eps, group_size, norm_before_gate):
    return _call("ssmkit_rmsnorm_fwd", (x, weight, bias, z), [_result(x.shape, x.dtype)],
                 **_norm_attrs(eps, group_size, norm_before_gate))[0]


def _rmsnorm_fwd(x, weight, bias, z, eps, group_size, norm_before_gate):
    return _rmsnorm(x, weight, bias, z, eps, group_size, norm_before_gate), (x, weight, bias, z)


def _rmsnorm_bwd(eps, group_size, norm_before_gate, inputs, dout):
    grads = _call("ssmkit_rmsnorm_bwd", (*inputs, dout), _grad_results(inputs),
                  **_norm_attrs(eps, group_size, norm_before_gate))
    return _present(inputs, grads)


_rmsnorm.defvjp(_rmsnorm_fwd, _rmsnorm_bwd)


def _as_rows(a):
    return None if a is None else jnp.reshape(a, _shapes.rows(jnp.shape(a)))


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """mamba_ssm's gated rmsnorm_fn: x, z (..., E); weight, bias (E). Differentiable in x,
    weight, bias and z."""
    x = jnp.asarray(x)
    out = _rmsnorm(_as_rows(x), weight, bias, _as_rows(z), float(eps), int(group_size or 0),
                   bool(norm_before_gate))
    return jnp.reshape(out, x.shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _add_rmsnorm(x, residual, weight, bias, eps):
    return tuple(_call("ssmkit_add_rmsnorm_fwd", (x, residual, weight, bias),
                       [_result(x.shape, x.dtype), _result(x.shape, _F32)], eps=np.float32(eps)))


def _add_rmsnorm_fwd(x, residual, weight, bias, eps):
    return _add_rmsnorm(x, residual, weight, bias, eps), (x, residual, weight, bias)


def _add_rmsnorm_bwd(eps, inputs, cotangents):
    dout, dresidual_out = cotangents
    grads = _call("ssmkit_add_rmsnorm_bwd", (*inputs, dout, dresidual_out), _grad_results(inputs),
                  eps=np.float32(eps))
    return _present(inputs, grads)


_add_rmsnorm.defvjp(_add_rmsnorm_fwd, _add_rmsnorm_bwd)


def rms_norm_fn(x, weight, bias, residual=None, prenorm=False, residual_in_fp32=True, eps=1e-6):
    """mamba_ssm's rms_norm_fn with a residual: residual_out = x + residual (float32),
    out = RMSNorm(residual_out). Returns out, or (out, residual_out) when prenorm.
    Differentiable in x, residual, weight and bias, through both outputs."""
    x = jnp.asarray(x)
    out, residual_out = _add_rmsnorm(_as_rows(x), _as_rows(residual), weight, bias, float(eps))
    out, residual_out = jnp.reshape(out, x.shape), jnp.reshape(residual_out, x.shape)
    if not prenorm:
        return out
    return out, residual_out if residual_in_fp32 else residual_out.astype(x.dtype)


__all__ = ["selective_scan_fn", "mamba_chunk_scan_combined", "selective_state_update",
           "causal_conv1d_fn", "causal_conv1d_update", "rmsnorm_fn", "rms_norm_fn"]
