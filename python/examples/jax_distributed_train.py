#!/usr/bin/env python3
"""Data-parallel training of a small Mamba language model written with ssmkit.jax's ops, over
several JAX processes (jax.distributed; CPU devices with gloo collectives, or GPUs).

Each step draws one global batch (the same for any number of processes: seeded by the step);
each process feeds its rows to its local devices, shard_map runs the loss and gradient per
device and averages them over all devices (pmean), and every process applies the same SGD
update, so the run follows the single-process run on the whole batch.

    python jax_distributed_train.py --out run.npz               # one process
    JAX_COORDINATOR_ADDRESS=127.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
        python jax_distributed_train.py --out run.npz &          # and JAX_PROCESS_ID=1
    srun --ntasks 4 python jax_distributed_train.py --out run.npz   # SLURM: jax.distributed
                                                                     # reads the job's layout

Process 0 saves the per-step losses and the final parameters to --out (numpy .npz).
"""
import argparse
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import ssmkit.jax as sj

VOCAB, D_MODEL, D_STATE, D_CONV, LAYERS = 256, 32, 8, 4, 2
D_INNER, DT_RANK = 2 * D_MODEL, math.ceil(D_MODEL / 16)


def init_params(seed):
    rng = np.random.default_rng(seed)

    def dense(fan_in, fan_out):
        return (rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)).astype(np.float32)

    def layer():
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), D_INNER))
        return {"norm": np.ones(D_MODEL, np.float32), "in_proj": dense(D_MODEL, 2 * D_INNER),
                "conv_w": dense(D_CONV, D_INNER).T.copy(), "conv_b": np.zeros(D_INNER, np.float32),
                "x_proj": dense(D_INNER, DT_RANK + 2 * D_STATE),
                "dt_proj": dense(DT_RANK, D_INNER),
                "dt_bias": np.log(np.expm1(dt)).astype(np.float32),
                "A_log": np.log(np.tile(np.arange(1, D_STATE + 1, dtype=np.float32),
                                        (D_INNER, 1))),
                "D": np.ones(D_INNER, np.float32), "out_proj": dense(D_INNER, D_MODEL)}

    return {"embed": dense(VOCAB, D_MODEL), "layers": [layer() for _ in range(LAYERS)],
            "norm_f": np.ones(D_MODEL, np.float32)}


def mixer(p, h):
    """The Mamba-1 mixer on h (B, L, E), its SSM ops from ssmkit.jax."""
    xz = jnp.einsum("ble,ed->bdl", h, p["in_proj"])
    x, z = xz[:, :D_INNER], xz[:, D_INNER:]
    x = sj.causal_conv1d_fn(x, p["conv_w"], p["conv_b"], activation="silu")
    dbc = jnp.einsum("bdl,dk->bkl", x, p["x_proj"])
    dt, B, C = dbc[:, :DT_RANK], dbc[:, DT_RANK:DT_RANK + D_STATE], dbc[:, DT_RANK + D_STATE:]
    delta = jnp.einsum("brl,rd->bdl", dt, p["dt_proj"])
    y = sj.selective_scan_fn(x, delta, -jnp.exp(p["A_log"]), B, C, p["D"], z=z,
                             delta_bias=p["dt_bias"], delta_softplus=True)
    return jnp.einsum("bdl,de->ble", y, p["out_proj"])


def loss_fn(params, ids):
    """Next-token cross-entropy of ids (B, L + 1), mean over this device's tokens."""
    h, residual = params["embed"][ids[:, :-1]], None
    for p in params["layers"]:
        normed, residual = sj.rms_norm_fn(h, p["norm"], None, residual=residual, prenorm=True,
                                          eps=1e-5)
        h = mixer(p, normed)
    h = sj.rms_norm_fn(h, params["norm_f"], None, residual=residual, eps=1e-5)
    logits = h @ params["embed"].T
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1))


def local_copy(x):
    """A replicated array's value from this process's own device (the array also spans the
    other processes' devices, which this one cannot read)."""
    return np.asarray(x.addressable_data(0))


def global_batch(step, batch, seqlen):
    return np.random.default_rng(1000 + step).integers(0, VOCAB, (batch, seqlen + 1),
                                                       dtype=np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4, help="global batch (sequences per step)")
    ap.add_argument("--seqlen", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if "JAX_NUM_PROCESSES" in os.environ or "SLURM_NTASKS" in os.environ:
        num = os.environ.get("JAX_NUM_PROCESSES")
        pid = os.environ.get("JAX_PROCESS_ID")
        jax.distributed.initialize(num_processes=None if num is None else int(num),
                                   process_id=None if pid is None else int(pid))
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rows = a.batch // jax.process_count()
    if a.batch % jax.device_count():
        raise SystemExit(f"--batch {a.batch} must be a multiple of the device count "
                         f"{jax.device_count()}")

    def local_step(params, ids):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids)
        return jax.lax.pmean(loss, "data"), jax.lax.pmean(grads, "data")

    step_fn = jax.jit(jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P("data")),
                                    out_specs=(P(), P()), check_vma=False))
    replicated = NamedSharding(mesh, P())
    params = jax.device_put(init_params(0), replicated)
    losses = []
    for step in range(a.steps):
        mine = global_batch(step, a.batch, a.seqlen)[
            jax.process_index() * rows:(jax.process_index() + 1) * rows]
        ids = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), mine)
        loss, grads = step_fn(params, ids)
        params = jax.tree_util.tree_map(lambda p, g: p - a.lr * g, params, grads)
        losses.append(float(local_copy(loss)))
    if jax.process_index() == 0:
        flat = {jax.tree_util.keystr(k): local_copy(v)
                for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
        np.savez(a.out, losses=np.array(losses), **flat)
        print(f"{jax.process_count()} process(es), losses {losses}")


if __name__ == "__main__":
    main()
