"""ssmkit.jax on GPU arrays: the CUDA FFI handlers against the CPU handlers on the same inputs
(outputs and jax.grad under jit, vmap, bf16, the decode steps, an error message), with every
result checked to live on the GPU. These need the extension's CUDA handlers (a library built
with its CUDA backend), a jax with a CUDA backend and a GPU; without them they are skipped,
never run on the CPU in the GPU's place. The first test, on how the targets are registered,
runs everywhere."""
import jax
import numpy as np
import pytest

import cases
import ssmkit._ssmkit as ext
import ssmkit.jax as sj
from checks import assert_close
from test_jax_ops import BF16_ARGS, _decode_inputs, loss_of, random_weights

F32_TOL = 2e-5
GRAD_TOL = 1e-4
# SSD's chunk products run on the tensor cores in TF32 (docs/cuda.md): ~1e-3 relative where
# the CPU gives ~1e-6. The bounds of tests/gpu/ssd_gpu_test.cpp.
TF32_TOL = 5e-3
TF32_GRAD_TOL = 2e-2


def _f32_tols(case):
    """(output, gradient) bounds of an f32 case on the GPU against the CPU."""
    if case.op == "mamba_chunk_scan_combined":
        return TF32_TOL, TF32_GRAD_TOL
    return F32_TOL, GRAD_TOL


def test_cuda_targets_are_the_cpu_targets():
    """Built with CUDA: the same target names for platform CUDA, other handlers. Without it:
    no CUDA handlers at all."""
    cpu = ext.ffi_targets()
    if not ext.built_with_cuda:
        assert not hasattr(ext, "cuda_ffi_targets")
        return
    cuda = ext.cuda_ffi_targets()
    assert sorted(cuda) == sorted(cpu)
    assert all(cuda[k] is not cpu[k] for k in cpu)


def _cuda_device():
    """(the first CUDA device, None) or (None, why there is none)."""
    if not ext.built_with_cuda:
        return None, "ssmkit was built without its CUDA backend (no CUDA FFI handlers)"
    try:
        return jax.devices("cuda")[0], None
    except RuntimeError as e:  # no CUDA backend in this jaxlib, or no GPU
        return None, f"no jax CUDA device: {e}"


GPU, NO_GPU = _cuda_device()
CPU = jax.devices("cpu")[0]
needs_gpu = pytest.mark.skipif(GPU is None, reason=str(NO_GPU))


def _on(device, tree):
    return jax.device_put(tree, device)


def _assert_on_gpu(tree):
    for leaf in jax.tree_util.tree_leaves(tree):
        assert leaf.devices() == {GPU}, f"a result on {leaf.devices()}, not the GPU"


def _both(fn, args):
    """fn (jitted) on the args on the GPU and on the CPU: (gpu result, cpu result)."""
    f = jax.jit(fn)
    got = f(_on(GPU, args))
    _assert_on_gpu(got)
    return got, f(_on(CPU, args))


@needs_gpu
@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_forward_and_grad_match_cpu(make, rng):
    case = make(rng)
    out_tol, grad_tol = _f32_tols(case)
    got, want = _both(lambda a: cases.call(sj, case, a), case.args)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        assert_close(g, w, out_tol, f"{case.name} GPU output {i}")
    weights = random_weights(rng, want)
    diff = {k: case.args[k] for k in case.diff}
    got, want = _both(jax.grad(loss_of(sj, case, weights)), diff)
    for k in case.diff:
        assert_close(got[k], want[k], grad_tol, f"{case.name} GPU d{k}")


@needs_gpu
@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_vmap_matches_cpu(make, rng):
    """Three slices, run one after another on the stream; a weight batched too."""
    case = make(rng)
    names = (case.vmap_arg, case.diff[2])
    batched = dict(case.args)
    for k in names:
        a = case.args[k]
        batched[k] = np.stack([a, a + 0.1 * cases.normal(rng, *a.shape), -a])
    in_axes = ({k: (0 if k in names else None) for k in case.args},)
    got, want = _both(jax.vmap(lambda a: cases.call(sj, case, a), in_axes=in_axes), batched)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape[0] == 3
        assert_close(g, w, _f32_tols(case)[0], f"{case.name} GPU vmapped output {i}")


@needs_gpu
@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_bf16_matches_cpu(make, rng):
    case = make(rng)
    for k in BF16_ARGS[case.op]:
        case.args[k] = case.args[k].astype(jax.numpy.bfloat16)
    got, want = _both(lambda a: cases.call(sj, case, a), case.args)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        assert_close(g, w, 1e-2, f"{case.name} GPU bf16 output {i}")
    weights = random_weights(rng, want)
    diff = {k: case.args[k] for k in case.diff}
    got, want = _both(jax.grad(loss_of(sj, case, weights)), diff)
    for k in case.diff:
        assert got[k].dtype == case.args[k].dtype, k
        assert_close(got[k], want[k], 3e-2, f"{case.name} GPU bf16 d{k}")


@needs_gpu
def test_decode_steps_match_cpu(rng):
    """The steps copy the input state into the new state on the stream, then update it."""
    a = _decode_inputs(rng)
    step = {k: a[k] for k in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias")}
    got, want = _both(lambda s: sj.selective_state_update(**s, dt_softplus=True), step)
    for g, w, what in zip(got, want, ("out", "new_state")):
        assert_close(g, w, F32_TOL, "GPU selective_state_update " + what)
    conv = {k: a[k] for k in ("x", "conv_state", "weight", "bias")}
    got, want = _both(lambda s: sj.causal_conv1d_update(**s, activation="silu"), conv)
    for g, w, what in zip(got, want, ("out", "new_conv_state")):
        assert_close(g, w, F32_TOL, "GPU causal_conv1d_update " + what)


@needs_gpu
def test_errors_carry_the_cpp_message_on_gpu(rng):
    case = cases.selective_scan(rng)
    bad = _on(GPU, dict(case.args, delta=case.args["delta"][:, :, :5]))
    with pytest.raises(Exception, match=r"selective_scan: delta: expected shape \(B, D, L\)"):
        jax.jit(lambda a: cases.call(sj, case, a))(bad)[0].block_until_ready()
