"""ssmkit.jax against the pure-JAX references (jax_references.py, lax.scan): outputs and
jax.grad gradients of every op under jit, and under vmap (outputs and per-example gradients,
with an activation and a weight batched), in f32 and bf16."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import cases
import jax_references as ref
import ssmkit.jax as sj
from checks import assert_close

F32_TOL = 2e-5
GRAD_TOL = 1e-4


def loss_of(module, case, weights):
    """sum_i <output_i, w_i> as a function of the differentiable arguments."""
    def loss(diff_args):
        outs = cases.call(module, case, {**case.args, **diff_args})
        return sum(jnp.sum(o.astype(jnp.float32) * w) for o, w in zip(outs, weights))
    return loss


def random_weights(rng, outputs):
    return [rng.standard_normal(np.shape(o)).astype(np.float32) for o in outputs]


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_forward_under_jit(make, rng):
    case = make(rng)
    got = jax.jit(lambda a: cases.call(sj, case, a))(case.args)
    want = cases.reference(case)
    assert len(got) == len(want) == case.outputs
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        assert_close(g, w, F32_TOL, f"{case.name} output {i}")


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_grad_under_jit(make, rng):
    case = make(rng)
    weights = random_weights(rng, cases.reference(case))
    diff = {k: case.args[k] for k in case.diff}
    got = jax.jit(jax.grad(loss_of(sj, case, weights)))(diff)
    want = jax.grad(loss_of(ref, case, weights))(diff)
    for k in case.diff:
        assert got[k].dtype == want[k].dtype
        assert_close(got[k], want[k], GRAD_TOL, f"{case.name} d{k}")


def _batched(rng, case, names, size=3):
    """The case's args with `names` stacked over a new leading axis (fresh values each)."""
    out = dict(case.args)
    for k in names:
        a = case.args[k]
        out[k] = np.stack([a] + [a + 0.1 * rng.standard_normal(a.shape).astype(a.dtype)
                                 for _ in range(size - 1)])
    return out


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_vmap_outputs_and_per_example_grads(make, rng):
    case = make(rng)
    names = (case.vmap_arg, case.diff[2])  # an activation and a weight (A, bias, ...)
    batched = _batched(rng, case, names)
    in_axes = ({k: (0 if k in names else None) for k in case.args},)

    def outputs(module):
        return jax.jit(jax.vmap(lambda a: cases.call(module, case, a), in_axes=in_axes))(batched)

    for i, (g, w) in enumerate(zip(outputs(sj), outputs(ref))):
        assert g.shape[0] == 3
        assert_close(g, w, F32_TOL, f"{case.name} vmapped output {i}")

    weights = random_weights(rng, cases.reference(case))
    diff_axes = {k: (0 if k in names else None) for k in case.diff}

    def per_example(module):
        def grads(args):
            return jax.grad(loss_of(module, case, weights))({k: args[k] for k in case.diff})
        return jax.jit(jax.vmap(grads, in_axes=in_axes))(batched)

    got, want = per_example(sj), per_example(ref)
    for k in case.diff:
        assert got[k].shape == (3,) + np.shape(case.args[k]), k
        assert_close(got[k], want[k], GRAD_TOL, f"{case.name} vmapped d{k}")
    del diff_axes


BF16_ARGS = {"selective_scan_fn": ("u", "delta", "B", "C", "z"),
             "mamba_chunk_scan_combined": ("x", "dt", "B", "C", "z"),
             "causal_conv1d_fn": ("x", "initial_states"),
             "rmsnorm_fn": ("x", "z"), "rms_norm_fn": ("x",)}


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_bf16(make, rng):
    """bf16 activations: outputs and gradients in bf16, against the reference in f32 on the
    same (rounded) values."""
    case = make(rng)
    bf16_names = BF16_ARGS[case.op]
    for k in bf16_names:
        case.args[k] = case.args[k].astype(ml_dtypes.bfloat16)
    as_f32 = {k: (v.astype(np.float32) if k in bf16_names else v) for k, v in case.args.items()}
    got = jax.jit(lambda a: cases.call(sj, case, a))(case.args)
    want = cases.reference(case, as_f32)
    assert got[0].dtype == jnp.bfloat16
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, 1e-2, f"{case.name} bf16 output {i}")
    weights = random_weights(rng, want)
    diff = {k: case.args[k] for k in case.diff}
    grads = jax.jit(jax.grad(loss_of(sj, case, weights)))(diff)
    want_grads = jax.grad(loss_of(ref, case, weights))({k: as_f32[k] for k in case.diff})
    for k in case.diff:
        assert grads[k].dtype == case.args[k].dtype, k
        assert_close(grads[k], want_grads[k], 3e-2, f"{case.name} bf16 d{k}")


def test_associative_scan_reference_agrees(rng):
    """The two pure-JAX scans (lax.scan, associative_scan) agree, so either may be the peer."""
    case = cases.selective_scan(rng)
    a = ref.selective_scan_fn(**case.args, **case.kwargs, method="scan")
    b = ref.selective_scan_fn(**case.args, **case.kwargs, method="associative")
    for x, y in zip(a, b):
        assert_close(x, y, 1e-5, "associative vs scan")


def _decode_inputs(rng, Bn=3, D=8, N=4, K=4):
    n = cases.normal
    return dict(state=n(rng, Bn, D, N), x=n(rng, Bn, D), dt=cases.uniform(rng, -2, 0, Bn, D),
                A=-np.exp(cases.uniform(rng, -1, 1, D, N)), B=n(rng, Bn, N), C=n(rng, Bn, N),
                D=n(rng, D), z=n(rng, Bn, D), dt_bias=cases.uniform(rng, -0.5, 0.5, D),
                conv_state=n(rng, Bn, D, K), weight=n(rng, D, K, scale=0.5), bias=n(rng, D))


def test_selective_state_update_jit_and_vmap(rng):
    a = _decode_inputs(rng)
    step_args = {k: a[k] for k in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias")}
    got = jax.jit(lambda s: sj.selective_state_update(**s, dt_softplus=True))(step_args)
    want = ref.selective_state_update(**step_args, dt_softplus=True)
    for g, w, what in zip(got, want, ("out", "new_state")):
        assert_close(g, w, F32_TOL, what)
    xs = np.stack([a["x"], 2 * a["x"]])
    f = jax.vmap(lambda x: sj.selective_state_update(**{**step_args, "x": x}, dt_softplus=True))
    r = jax.vmap(lambda x: ref.selective_state_update(**{**step_args, "x": x}, dt_softplus=True))
    for g, w, what in zip(jax.jit(f)(xs), r(xs), ("out", "new_state")):
        assert_close(g, w, F32_TOL, "vmapped " + what)


def test_causal_conv1d_update_jit_and_vmap(rng):
    a = _decode_inputs(rng)
    args = dict(x=a["x"], conv_state=a["conv_state"], weight=a["weight"], bias=a["bias"],
                activation="silu")
    got = jax.jit(lambda s: sj.causal_conv1d_update(**s, activation="silu"))(
        {k: v for k, v in args.items() if k != "activation"})
    want = ref.causal_conv1d_update(**args)
    for g, w, what in zip(got, want, ("out", "new_conv_state")):
        assert_close(g, w, F32_TOL, what)
    states = np.stack([a["conv_state"], -a["conv_state"]])
    f = jax.vmap(lambda s: sj.causal_conv1d_update(**{**args, "conv_state": s}))
    r = jax.vmap(lambda s: ref.causal_conv1d_update(**{**args, "conv_state": s}))
    for g, w, what in zip(jax.jit(f)(states), r(states), ("out", "new_conv_state")):
        assert_close(g, w, F32_TOL, "vmapped " + what)


def test_errors_carry_the_cpp_message(rng):
    case = cases.selective_scan(rng)
    bad = dict(case.args, delta=case.args["delta"][:, :, :5])
    with pytest.raises(Exception, match=r"selective_scan: delta: expected shape \(B, D, L\)"):
        jax.jit(lambda a: cases.call(sj, case, a))(bad)[0].block_until_ready()
    # the same under jax.grad: the forward fails first, with the same message
    with pytest.raises(Exception, match=r"selective_scan: delta: expected"):
        jax.grad(lambda u: jnp.sum(cases.call(sj, case, dict(bad, u=u))[0]))(bad["u"])
    with pytest.raises(Exception, match=r"rmsnorm: options.eps: expected a finite value > 0"):
        sj.rmsnorm_fn(case.args["u"], np.ones(16, np.float32), None, eps=0.0).block_until_ready()
    with pytest.raises(Exception, match=r"causal_conv1d: weight: expected"):
        sj.causal_conv1d_fn(case.args["u"], np.ones((8, 9), np.float32)).block_until_ready()
    with pytest.raises(ValueError, match="algorithm"):
        sj.selective_scan_fn(**case.args, algorithm="fastest")
    with pytest.raises(NotImplementedError, match="conv_state_indices"):
        sj.causal_conv1d_update(case.args["u"][:, :, 0], np.zeros((2, 8, 3), np.float32),
                                np.ones((8, 4), np.float32), conv_state_indices=np.zeros(2))
    with pytest.raises(Exception, match=r"ssd: cu_seqlens: expected batch B = 1"):
        sj.mamba_chunk_scan_combined(**cases.ssd(rng).args,
                                     cu_seqlens=np.array([0, 3, 12]))[0].block_until_ready()


def test_rank_minus_one_marks_an_absent_operand(rng):
    """Nx has no empty tensors, so the EXLA route (bindings/elixir, Ssmkit.EXLA) cannot pass
    the (0,) arrays ssmkit.jax uses for a missing optional: a scalar whose rank in `ranks` is -1
    is absent too, operand or result."""
    f32 = np.float32
    u, delta = rng.standard_normal((2, 2, 8, 12)).astype(f32)
    A = -np.exp(rng.standard_normal((8, 4))).astype(f32)
    B, C = rng.standard_normal((2, 2, 4, 12)).astype(f32)
    want_out, want_last = sj.selective_scan_fn(u, delta, A, B, C, delta_softplus=True,
                                               return_last_state=True)
    marker = jnp.zeros((), jnp.float32)
    results = [jax.ShapeDtypeStruct(u.shape, u.dtype), jax.ShapeDtypeStruct((2, 8, 4), f32),
               jax.ShapeDtypeStruct((), f32)]
    ranks = np.array([3, 3, 2, 3, 3] + [-1] * 6 + [3, 3, -1], np.int64)
    out, last, _ = jax.ffi.ffi_call("ssmkit_selective_scan_fwd", results)(
        u, delta, A, B, C, *([marker] * 6), ranks=ranks, delta_softplus=True,
        algorithm=np.int64(0), chunk_length=np.int64(0))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want_out))
    np.testing.assert_array_equal(np.asarray(last), np.asarray(want_last))
