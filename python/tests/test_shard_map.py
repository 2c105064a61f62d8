"""Every op, and a Mamba network's training gradient, under shard_map over 4 host devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4, set in conftest.py): the batch split
across devices, weights replicated, gradients summed (psum) or averaged (pmean) over devices;
all against the reference on the whole batch on one device."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import cases
import jax_references
import mamba_model
import ssmkit.jax as sj
from checks import assert_close

DEVICES = 4


def placed(mesh, arrays, specs):
    """The arrays laid out on the mesh as the specs say (shard_map wants them so)."""
    return [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs)]


@pytest.fixture(scope="module")
def mesh():
    assert jax.device_count() == DEVICES, "conftest.py sets 4 host devices"
    return jax.make_mesh((DEVICES,), ("data",))


SHARD_CASES = [lambda r: cases.selective_scan(r, Bn=4), lambda r: cases.ssd(r, Bn=4),
               lambda r: cases.ssd(r, Bn=4, seq_idx=True), lambda r: cases.conv1d(r, Bn=4),
               lambda r: cases.rmsnorm(r, M=8, lead=4), lambda r: cases.add_rmsnorm(r, M=8)]
SHARD_NAMES = ["scan", "ssd", "ssd_seq_idx", "conv1d", "rmsnorm", "add_rmsnorm"]


@pytest.mark.parametrize("make", SHARD_CASES, ids=SHARD_NAMES)
def test_op_data_parallel(make, rng, mesh):
    case = make(rng)
    outs = cases.reference(case)
    weights = [rng.standard_normal(np.shape(o)).astype(np.float32) for o in outs]
    names = sorted(case.args)
    specs = tuple(P("data") if k in case.batch_args else P() for k in names)

    def local(*arrays):
        args = dict(zip(names, arrays[:len(names)]))
        local_weights = arrays[len(names):]
        diff = {k: args[k] for k in case.diff}

        def loss(d):
            o = cases.call(sj, case, {**args, **d})
            return sum(jnp.sum(x.astype(jnp.float32) * w) for x, w in zip(o, local_weights))

        grads = jax.grad(loss)(diff)
        # a replicated weight's gradient is the sum over the shards; a sharded input's is local
        grads = {k: (g if k in case.batch_args else jax.lax.psum(g, "data"))
                 for k, g in grads.items()}
        return cases.call(sj, case, args), grads

    out_specs = (tuple(P("data") for _ in outs),
                 {k: (P("data") if k in case.batch_args else P()) for k in case.diff})
    sharded = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs + (P("data"),) * len(outs),
                                    out_specs=out_specs, check_vma=False))
    arrays = [case.args[k] for k in names] + weights
    got_outs, got_grads = sharded(*placed(mesh, arrays, specs + (P("data"),) * len(outs)))

    def full_loss(d):
        o = cases.reference(case, {**case.args, **d})
        return sum(jnp.sum(x.astype(jnp.float32) * w) for x, w in zip(o, weights))

    want_grads = jax.grad(full_loss)({k: case.args[k] for k in case.diff})
    for i, (g, w) in enumerate(zip(got_outs, outs)):
        assert_close(g, w, 2e-5, f"{case.name} sharded output {i}")
    for k in case.diff:
        assert_close(got_grads[k], want_grads[k], 1e-4, f"{case.name} sharded d{k}")


def test_training_step_data_parallel(rng, mesh):
    """One training step of a Mamba network: per-device loss and gradient on a quarter of the
    batch, pmean over devices, equal to the reference's on the whole batch."""
    params = mamba_model.init_params(rng, 10, 16, n_layers=2, d_out=3, d_state=8)
    x = rng.standard_normal((8, 20, 10)).astype(np.float32)
    target = rng.standard_normal((8, 20, 3)).astype(np.float32)

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                       out_specs=(P(), P()), check_vma=False)
    def step(params, x, target):
        loss, grads = jax.value_and_grad(
            lambda p: mamba_model.mse_loss(sj, p, x, target))(params)
        return jax.lax.pmean(loss, "data"), jax.lax.pmean(grads, "data")

    loss, grads = jax.jit(step)(jax.device_put(params, NamedSharding(mesh, P())),
                                *placed(mesh, [x, target], [P("data"), P("data")]))
    want_loss, want_grads = jax.value_and_grad(
        lambda p: mamba_model.mse_loss(jax_references, p, x, target))(params)
    assert_close(loss, want_loss, 1e-5, "loss")
    flat, _ = jax.tree_util.tree_flatten_with_path(grads)
    want_flat = jax.tree_util.tree_leaves(want_grads)
    for (path, g), w in zip(flat, want_flat):
        assert_close(g, w, 2e-4, jax.tree_util.keystr(path))
