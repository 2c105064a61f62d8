"""Packed sequences (cu_seqlens, seq_idx) through the numpy API and ssmkit.jax, mirroring
tests/*_varlen_test.cpp: a packed batch of sequences of different lengths (1, and lengths that
are multiples of no chunk size) equals each sequence run alone through the pure-JAX
references: outputs, final states, varlen states, and every gradient (the numpy backward
functions, and jax.grad through ssmkit.jax under jit) against jax.vjp of the per-sequence
references. Bad packing arguments raise the C++ op's message."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_references as ref
import ssmkit
import ssmkit.jax as sj
from cases import normal, uniform
from checks import assert_close

LENGTHS = (1, 7, 16, 3, 21)
CU = np.cumsum((0,) + LENGTHS).astype(np.int32)
S, L = len(LENGTHS), int(CU[-1])
TOL, GRAD_TOL = 2e-5, 1e-4


def check_jax_gradients(args, packed, alone, w_out, w_var):
    """jax.grad (under jit) of sum(out w_out) + sum(varlen w_var) through ssmkit.jax's packed
    call, `packed(args)`, against the same through the per-sequence references, `alone`."""
    def loss(fn):
        def f(d):
            out, varlen = fn(d)
            return jnp.sum(out * w_out) + jnp.sum(varlen * w_var)
        return f

    got = jax.jit(jax.grad(loss(packed)))(args)
    want = jax.grad(loss(alone))(args)
    for k in args:
        assert_close(got[k], want[k], GRAD_TOL, "d" + k)
    assert_close(jax.jit(loss(packed))(args), loss(alone)(args), TOL, "loss")


def pieces(a, axis):
    """The per-sequence slices of a packed array along `axis`."""
    return [jnp.take(a, jnp.arange(CU[k], CU[k + 1]), axis=axis) for k in range(S)]


# ------------------------------------------------------------------ selective scan (Mamba-1)

SCAN_SEQ = ("u", "delta", "B", "C", "z")  # packed along their last axis


def scan_args(rng, D=6, N=4):
    return dict(u=normal(rng, 1, D, L), delta=uniform(rng, -2.0, 0.5, 1, D, L),
                A=-np.exp(uniform(rng, -1.0, 1.5, D, N)), B=normal(rng, 1, N, L),
                C=normal(rng, 1, N, L), D=normal(rng, D), z=normal(rng, 1, D, L),
                delta_bias=uniform(rng, -0.5, 0.5, D), initial_state=normal(rng, S, D, N))


def scan_alone(args):
    """out (1, D, L) and varlen states (S, D, N): each sequence through the reference."""
    split = {k: pieces(args[k], 2) for k in SCAN_SEQ}
    outs, states = [], []
    for k in range(S):
        one = dict(args, **{n: split[n][k] for n in SCAN_SEQ},
                   initial_state=args["initial_state"][k:k + 1])
        out, last = ref.selective_scan_fn(**one, delta_softplus=True, return_last_state=True)
        outs.append(out)
        states.append(last[0])
    return jnp.concatenate(outs, axis=2), jnp.stack(states)


def test_scan_numpy_packed_equals_alone(rng):
    args = scan_args(rng)
    out, last, varlen = ssmkit.selective_scan_fn(
        **args, delta_softplus=True, return_last_state=True, cu_seqlens=CU,
        return_varlen_states=True)
    want_out, want_varlen = scan_alone(args)
    assert_close(out, want_out, TOL, "out")
    assert_close(varlen, want_varlen, TOL, "varlen_states")
    assert_close(last, want_varlen[-1:], TOL, "last_state")
    # mamba_ssm's return convention: what was asked for, in order.
    only_varlen = ssmkit.selective_scan_fn(**args, delta_softplus=True, cu_seqlens=CU,
                                           return_varlen_states=True)
    assert len(only_varlen) == 2 and only_varlen[1].shape == varlen.shape

    dout, dvarlen = normal(rng, *out.shape), normal(rng, *varlen.shape)
    grads = ssmkit.selective_scan_bwd(dout, **args, delta_softplus=True, cu_seqlens=CU,
                                      dvarlen_states=dvarlen)
    diff = {k: args[k] for k in args}
    _, vjp = jax.vjp(lambda d: scan_alone({**args, **d}), diff)
    (want,) = vjp((dout, dvarlen))
    for k in diff:
        assert_close(getattr(grads, "d" + k), want[k], GRAD_TOL, "d" + k)


def test_scan_jax_gradients_through_varlen_states(rng):
    args = scan_args(rng)
    check_jax_gradients(
        args, lambda d: sj.selective_scan_fn(**d, delta_softplus=True, cu_seqlens=CU,
                                             return_varlen_states=True),
        scan_alone, normal(rng, *args["u"].shape), normal(rng, *args["initial_state"].shape))


def test_scan_seq_idx_two_rows(rng):
    """seq_idx (B = 2): each row's sequences start from zeros, the first from its h0 row."""
    D, N = 5, 3
    args = dict(u=normal(rng, 2, D, L), delta=uniform(rng, -2.0, 0.5, 2, D, L),
                A=-np.exp(uniform(rng, -1.0, 1.5, D, N)), B=normal(rng, 2, N, L),
                C=normal(rng, 2, N, L), initial_state=normal(rng, 2, D, N))
    seq_idx = np.repeat(np.arange(S), LENGTHS)[None].repeat(2, 0).astype(np.int32)
    out = ssmkit.selective_scan_fn(**args, delta_softplus=True, seq_idx=seq_idx)
    for b in range(2):
        for k in range(S):
            sl = slice(CU[k], CU[k + 1])
            one = dict(u=args["u"][b:b + 1, :, sl], delta=args["delta"][b:b + 1, :, sl],
                       A=args["A"], B=args["B"][b:b + 1, :, sl], C=args["C"][b:b + 1, :, sl],
                       initial_state=args["initial_state"][b:b + 1] if k == 0 else None)
            want = ref.selective_scan_fn(**one, delta_softplus=True)
            assert_close(out[b:b + 1, :, sl], want, TOL, f"row {b} sequence {k}")
    jax_out = sj.selective_scan_fn(**args, delta_softplus=True, seq_idx=seq_idx)
    assert_close(jax_out, out, TOL, "ssmkit.jax")


# ------------------------------------------------------------------ SSD (Mamba-2)

SSD_SEQ = ("x", "dt", "B", "C", "z")  # packed along axis 1


def ssd_args(rng, H=4, P=3, G=2, N=4):
    return dict(x=normal(rng, 1, L, H, P), dt=uniform(rng, -3.0, -0.5, 1, L, H),
                A=-np.exp(uniform(rng, 0.0, 1.5, H)), B=normal(rng, 1, L, G, N),
                C=normal(rng, 1, L, G, N), D=normal(rng, H), z=normal(rng, 1, L, H, P),
                dt_bias=uniform(rng, -0.5, 0.5, H), initial_states=normal(rng, S, H, P, N))


def ssd_alone(args):
    split = {k: pieces(args[k], 1) for k in SSD_SEQ}
    outs, states = [], []
    for k in range(S):
        one = dict(args, **{n: split[n][k] for n in SSD_SEQ},
                   initial_states=args["initial_states"][k:k + 1])
        out, last = ref.mamba_chunk_scan_combined(**one, dt_softplus=True,
                                                  return_final_states=True)
        outs.append(out)
        states.append(last[0])
    return jnp.concatenate(outs, axis=1), jnp.stack(states)


@pytest.mark.parametrize("algorithm", ["sequential", "chunked"])
def test_ssd_numpy_packed_equals_alone(rng, algorithm):
    args = ssd_args(rng)
    seq_idx = np.repeat(np.arange(S), LENGTHS)[None].astype(np.int32)
    out, final, varlen = ssmkit.mamba_chunk_scan_combined(
        **args, chunk_size=8, seq_idx=seq_idx, cu_seqlens=CU, dt_softplus=True,
        return_final_states=True, return_varlen_states=True, algorithm=algorithm)
    want_out, want_varlen = ssd_alone(args)
    assert_close(out, want_out, TOL, "out")
    assert_close(varlen, want_varlen, TOL, "varlen_states")
    assert_close(final, want_varlen[-1:], TOL, "final_states")

    dout, dvarlen = normal(rng, *out.shape), normal(rng, *varlen.shape)
    grads = ssmkit.mamba_chunk_scan_combined_bwd(
        dout, **args, chunk_size=8, cu_seqlens=CU, dt_softplus=True, dvarlen_states=dvarlen,
        algorithm=algorithm)
    _, vjp = jax.vjp(lambda d: ssd_alone({**args, **d}), args)
    (want,) = vjp((dout, dvarlen))
    for k in args:
        assert_close(getattr(grads, "d" + k), want[k], GRAD_TOL, "d" + k)


def test_ssd_jax_gradients_through_varlen_states(rng):
    args = ssd_args(rng)
    check_jax_gradients(
        args, lambda d: sj.mamba_chunk_scan_combined(**d, chunk_size=8, cu_seqlens=CU,
                                                     dt_softplus=True, return_varlen_states=True),
        ssd_alone, normal(rng, *args["x"].shape), normal(rng, *args["initial_states"].shape))


# ------------------------------------------------------------------ causal conv1d

def test_conv1d_seq_idx_packed_equals_alone(rng):
    D, K = 6, 4
    x, weight, bias = normal(rng, 1, D, L), normal(rng, D, K, scale=0.5), normal(rng, D)
    h0 = normal(rng, 1, D, K - 1)
    seq_idx = np.repeat(np.arange(S), LENGTHS)[None].astype(np.int32)
    out, final = ssmkit.causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, initial_states=h0,
                                         return_final_states=True, activation="silu")

    def alone(x, weight, bias, h0):
        outs = []
        for k, xk in enumerate(pieces(x, 2)):
            o, f = ref.causal_conv1d_fn(xk, weight, bias, h0 if k == 0 else None,
                                        return_final_states=True, activation="silu")
            outs.append(o)
        return jnp.concatenate(outs, axis=2), f

    want_out, want_final = alone(x, weight, bias, h0)
    assert_close(out, want_out, TOL, "out")
    assert_close(final, want_final, TOL, "final_states")
    dout, dfinal = normal(rng, *out.shape), normal(rng, *final.shape)
    grads = ssmkit.causal_conv1d_bwd(dout, x, weight, bias, h0, dfinal, activation="silu",
                                     seq_idx=seq_idx)
    _, vjp = jax.vjp(alone, x, weight, bias, h0)
    for name, got, want in zip(("dx", "dweight", "dbias", "dinitial_states"), grads,
                               vjp((dout, dfinal))):
        assert_close(got, want, GRAD_TOL, name)

    def jax_loss(x, weight, bias, h0):
        o, f = sj.causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, initial_states=h0,
                                   return_final_states=True, activation="silu")
        return jnp.sum(o * dout) + jnp.sum(f * dfinal)
    for name, got, want in zip(("dx", "dweight", "dbias", "dinitial_states"),
                               jax.jit(jax.grad(jax_loss, argnums=(0, 1, 2, 3)))(
                                   x, weight, bias, h0), vjp((dout, dfinal))):
        assert_close(got, want, GRAD_TOL, "ssmkit.jax " + name)


# ------------------------------------------------------------------ bad packing arguments

def test_bad_packing_raises_the_cpp_message(rng):
    args = scan_args(rng)
    with pytest.raises(ValueError, match=r"selective_scan: cu_seqlens: expected strictly "
                                         r"increasing offsets"):
        ssmkit.selective_scan_fn(**args, cu_seqlens=np.array([0, 4, 4, 10, 20, 48]))
    with pytest.raises(ValueError, match=r"cu_seqlens: expected cu_seqlens\[S\] = L = 48"):
        ssmkit.selective_scan_fn(**args, cu_seqlens=np.array([0, 4, 47]))
    with pytest.raises(ValueError, match="return_varlen_states: expected cu_seqlens"):
        ssmkit.selective_scan_fn(**dict(args, initial_state=None), return_varlen_states=True)
    with pytest.raises(ValueError, match=r"seq_idx: expected values non-decreasing"):
        ssmkit.selective_scan_fn(**dict(args, initial_state=None),
                                 seq_idx=np.arange(L)[::-1][None].copy())
    s = ssd_args(rng)
    with pytest.raises(ValueError, match=r"ssd: cu_seqlens: expected batch B = 1"):
        ssmkit.mamba_chunk_scan_combined(**dict(s, **{k: np.repeat(s[k], 2, 0) for k in SSD_SEQ},
                                                initial_states=None), cu_seqlens=CU)
    with pytest.raises(Exception, match=r"ssd: cu_seqlens: expected strictly increasing"):
        sj.mamba_chunk_scan_combined(**s, cu_seqlens=np.array([0, 9, 9, 20, 30, 48]),
                                     return_varlen_states=True)[0].block_until_ready()
    with pytest.raises(ValueError, match=r"causal_conv1d: seq_idx: expected dtype i32|"
                                         r"seq_idx: expected shape"):
        ssmkit.causal_conv1d_fn(args["u"], np.ones((6, 4), np.float32),
                                seq_idx=np.zeros((1, L - 1), np.int32))
