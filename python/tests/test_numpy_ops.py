"""The numpy API (ssmkit.*) against the pure-JAX references: every forward, every backward
function (against jax.vjp of the reference), strided inputs read in place, the decode states
updated in place, bf16 through ml_dtypes, and bad arguments raising Python exceptions with
the C++ messages."""
import jax
import ml_dtypes
import numpy as np
import pytest

import cases
import jax_references as ref
import ssmkit
from checks import assert_close

# op -> (backward function, its keyword for the final state's gradient, forward-only kwargs)
BACKWARD = {
    "selective_scan_fn": ("selective_scan_bwd", "dlast_state", ("return_last_state",)),
    "mamba_chunk_scan_combined": ("mamba_chunk_scan_combined_bwd", "dfinal_states",
                                  ("return_final_states",)),
    "causal_conv1d_fn": ("causal_conv1d_bwd", "dfinal_states", ("return_final_states",)),
    "rmsnorm_fn": ("rmsnorm_bwd", None, ()),
    "rms_norm_fn": ("rms_norm_bwd", "dresidual_out", ("prenorm",)),
}


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_forward(make, rng):
    case = make(rng)
    got = cases.call(ssmkit, case)
    for i, (g, w) in enumerate(zip(got, cases.reference(case))):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype
        assert_close(g, w, 2e-5, f"{case.name} output {i}")


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_backward_function(make, rng):
    case = make(rng)
    outs, vjp = jax.vjp(lambda d: cases.reference(case, {**case.args, **d}),
                        {k: case.args[k] for k in case.diff})
    cotangents = tuple(rng.standard_normal(np.shape(o)).astype(np.float32) for o in outs)
    (want,) = vjp(cotangents)
    bwd_name, dfinal_key, forward_only = BACKWARD[case.op]
    kwargs = {k: v for k, v in case.kwargs.items() if k not in forward_only}
    if dfinal_key:
        kwargs[dfinal_key] = cotangents[1]
    grads = getattr(ssmkit, bwd_name)(cotangents[0], **case.args, **kwargs)
    for k in case.diff:
        got = getattr(grads, "d" + k)
        assert got.dtype == case.args[k].dtype
        assert_close(got, want[k], 1e-4, f"{case.name} d{k}")


def test_absent_inputs_have_no_gradient(rng):
    case = cases.selective_scan(rng)
    args = {k: case.args[k] for k in ("u", "delta", "A", "B", "C")}
    out = ssmkit.selective_scan_fn(**args)
    grads = ssmkit.selective_scan_bwd(np.ones_like(out), **args)
    assert grads.dD is None and grads.dz is None and grads.dinitial_state is None
    assert_close(out, ref.selective_scan_fn(**args), 2e-5, "out without the optionals")


def test_strided_inputs_are_read_in_place(rng):
    """Views with a non-unit stride outside the last dim (channels every other one, a
    transposed batch) give the same results as their contiguous copies."""
    case = cases.selective_scan(rng, Bn=2, D=16)
    wide = {k: case.args[k] for k in ("u", "delta", "z")}
    strided = dict(case.args)
    for k, v in wide.items():
        strided[k] = v[:, ::2]  # (B, D/2, L) view, stride 2 over channels
        assert not strided[k].flags.c_contiguous
    strided.update(A=case.args["A"][::2], D=case.args["D"][::2],
                   delta_bias=case.args["delta_bias"][::2],
                   initial_state=case.args["initial_state"][:, ::2])
    contiguous = {k: np.ascontiguousarray(v) for k, v in strided.items()}
    got = ssmkit.selective_scan_fn(**strided, **case.kwargs)
    want = ssmkit.selective_scan_fn(**contiguous, **case.kwargs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_selective_state_update_in_place(rng):
    n = cases.normal
    state = n(rng, 3, 8, 4)
    args = dict(x=n(rng, 3, 8), dt=cases.uniform(rng, -2, 0, 3, 8),
                A=-np.exp(cases.uniform(rng, -1, 1, 8, 4)), B=n(rng, 3, 4), C=n(rng, 3, 4),
                D=n(rng, 8), z=n(rng, 3, 8), dt_bias=cases.uniform(rng, -0.5, 0.5, 8))
    want_out, want_state = ref.selective_state_update(state, **args, dt_softplus=True)
    out = ssmkit.selective_state_update(state, **args, dt_softplus=True)
    assert_close(out, want_out, 2e-5, "out")
    assert_close(state, want_state, 2e-5, "state (in place)")
    # A skipped row (negative index) keeps its state.
    before = state.copy()
    ssmkit.selective_state_update(state, **args, dt_softplus=True,
                                  state_batch_indices=np.array([0, -1, 2]))
    np.testing.assert_array_equal(state[1], before[1])
    assert not np.array_equal(state[0], before[0])
    with pytest.raises(ValueError, match="writable"):
        frozen = state.copy()
        frozen.flags.writeable = False
        ssmkit.selective_state_update(frozen, **args)


def test_causal_conv1d_update_in_place(rng):
    n = cases.normal
    conv_state, x, weight, bias = n(rng, 2, 6, 4), n(rng, 2, 6), n(rng, 6, 4), n(rng, 6)
    want_out, want_state = ref.causal_conv1d_update(x, conv_state, weight, bias, "silu")
    out = ssmkit.causal_conv1d_update(x, conv_state, weight, bias, activation="silu")
    assert_close(out, want_out, 2e-5, "out")
    assert_close(conv_state, want_state, 0, "conv_state (in place)")


def test_bf16(rng):
    case = cases.selective_scan(rng)
    bf16 = {k: (v.astype(ml_dtypes.bfloat16) if k in ("u", "delta", "B", "C", "z") else v)
            for k, v in case.args.items()}
    out, last = ssmkit.selective_scan_fn(**bf16, **case.kwargs)
    assert out.dtype == ssmkit.bfloat16 and last.dtype == np.float32
    want = ref.selective_scan_fn(**{k: v.astype(np.float32) for k, v in bf16.items()},
                                 **case.kwargs)
    assert_close(out, want[0], 1e-2, "bf16 out")
    grads = ssmkit.selective_scan_bwd(out, **bf16, delta_softplus=True)
    assert grads.du.dtype == ssmkit.bfloat16 and grads.dA.dtype == np.float32


def test_bad_arguments_raise_with_the_cpp_message(rng):
    case = cases.selective_scan(rng)
    a = case.args
    with pytest.raises(ssmkit.InvalidArgumentError,
                       match=r"^selective_scan: delta: expected shape \(B, D, L\) = \(2, 8, 16\), "
                             r"given \(2, 8, 15\)$"):
        ssmkit.selective_scan_fn(**dict(a, delta=a["delta"][:, :, 1:]))
    with pytest.raises(ValueError, match=r"selective_scan: A: expected state size N in \[1, 256\]"):
        ssmkit.selective_scan_fn(**dict(a, A=np.zeros((8, 300), np.float32)))
    # A gradient asked for an absent input (the public selective_scan_bwd never asks, so the
    # extension is called directly).
    with pytest.raises(ValueError, match="selective_scan: dz"):
        no_grads = dict.fromkeys(["du", "ddelta", "dA", "dB", "dC", "dD", "ddelta_bias",
                                  "dinitial_state", "dfinal_state", "dvarlen_states",
                                  "seq_idx", "cu_seqlens", "chunk_states"])
        ssmkit._ssmkit.selective_scan_bwd(dict(
            a, **no_grads, z=None, delta_softplus=True, algorithm="sequential", chunk_length=0,
            dout=a["u"], dz=np.empty_like(a["u"])))
    with pytest.raises(TypeError, match="u: expected float32 or bfloat16.*given float64"):
        ssmkit.selective_scan_fn(**dict(a, u=a["u"].astype(np.float64)))
    with pytest.raises(ValueError, match="algorithm"):
        ssmkit.selective_scan_fn(**a, algorithm="fastest")
    with pytest.raises(ValueError, match=r"rmsnorm: options.eps"):
        ssmkit.rmsnorm_fn(a["u"], np.ones(16, np.float32), None, eps=-1.0)
    with pytest.raises(ValueError, match=r"rmsnorm: options.group_size"):
        ssmkit.rmsnorm_fn(a["u"], np.ones(16, np.float32), None, group_size=5)
    with pytest.raises(ValueError, match="activation"):
        ssmkit.causal_conv1d_fn(a["u"], np.ones((8, 4), np.float32), activation="relu")
    with pytest.raises(NotImplementedError, match="cache_seqlens"):
        ssmkit.causal_conv1d_update(a["u"][:, :, 0], np.zeros((2, 8, 3), np.float32),
                                    np.ones((8, 4), np.float32), cache_seqlens=np.zeros(2))
    with pytest.raises(ValueError, match=r"selective_state_update: state"):
        ssmkit.selective_state_update(np.zeros((3, 8, 4, 2, 2), np.float32), a["u"][:, :, 0],
                                      a["u"][:, :, 0], a["A"], a["B"][:, :, 0], a["C"][:, :, 0])
    with pytest.raises(ValueError, match=r"mamba_chunk_scan_combined|ssd"):
        s = cases.ssd(rng).args
        ssmkit.mamba_chunk_scan_combined(**dict(s, B=s["B"][:, :, :1, :3]))
    # nothing crashed: the interpreter is still here and the library still works
    assert_close(ssmkit.selective_scan_fn(**a, **case.kwargs)[0],
                 ref.selective_scan_fn(**a, **case.kwargs)[0], 2e-5, "after the errors")
