"""A Mamba-1 network in plain jax.numpy whose SSM ops come from a module: ssmkit.jax or the
pure-JAX references (jax_references). Used by the training test and by bench/jax_train_step.py
(the `policy-train` network of docs/targets.md).

    x (B, L, d_in) -> embedding -> n_layers x [add + RMSNorm -> Mamba mixer] -> add + RMSNorm
    -> head (B, L, d_out)

Mixer: in_proj -> (x, z); causal conv1d (silu) on x; x_proj -> (dt, B, C); dt_proj;
selective scan with D, the z gate, delta_bias and softplus; out_proj.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np


def init_params(rng, d_in, d_model, n_layers, d_out, expand=2, d_state=16, d_conv=4,
                dt_rank=None):
    """Parameters as a pytree of float32 numpy arrays, Mamba's initialisation in spirit."""
    d_inner = expand * d_model
    dt_rank = dt_rank or math.ceil(d_model / 16)

    def dense(fan_in, fan_out):
        return (rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)).astype(np.float32)

    def layer():
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), d_inner))
        return dict(
            norm=np.ones(d_model, np.float32),
            in_proj=dense(d_model, 2 * d_inner),
            conv_w=(rng.standard_normal((d_inner, d_conv)) / math.sqrt(d_conv)).astype(np.float32),
            conv_b=np.zeros(d_inner, np.float32),
            x_proj=dense(d_inner, dt_rank + 2 * d_state),
            dt_proj=dense(dt_rank, d_inner),
            dt_bias=np.log(np.expm1(dt)).astype(np.float32),  # softplus^-1 of dt
            A_log=np.log(np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1))),
            D=np.ones(d_inner, np.float32),
            out_proj=dense(d_inner, d_model))

    return dict(embed=dense(d_in, d_model), layers=[layer() for _ in range(n_layers)],
                norm_f=np.ones(d_model, np.float32), head=dense(d_model, d_out))


def mixer(ops, p, h):
    """h (B, L, d_model) -> (B, L, d_model)."""
    d_inner = p["D"].shape[0]
    d_state = p["A_log"].shape[1]
    dt_rank = p["dt_proj"].shape[0]
    xz = jnp.einsum("bld,de->bel", h, p["in_proj"])  # (B, 2 D, L)
    x, z = xz[:, :d_inner], xz[:, d_inner:]
    x = ops.causal_conv1d_fn(x, p["conv_w"], p["conv_b"], activation="silu")
    x_dbl = jnp.einsum("bdl,dk->bkl", x, p["x_proj"])  # (B, R + 2N, L)
    dt = x_dbl[:, :dt_rank]
    Bm = x_dbl[:, dt_rank:dt_rank + d_state]
    Cm = x_dbl[:, dt_rank + d_state:]
    delta = jnp.einsum("brl,rd->bdl", dt, p["dt_proj"])
    y = ops.selective_scan_fn(x, delta, -jnp.exp(p["A_log"]), Bm, Cm, p["D"], z=z,
                              delta_bias=p["dt_bias"], delta_softplus=True)
    return jnp.einsum("bdl,de->ble", y, p["out_proj"])


def forward(ops, params, x):
    """x (B, L, d_in) -> (B, L, d_out)."""
    h = x @ params["embed"]
    residual = None
    for p in params["layers"]:
        normed, residual = ops.rms_norm_fn(h, p["norm"], None, residual=residual, prenorm=True,
                                           eps=1e-5)
        h = mixer(ops, p, normed)
    h = ops.rms_norm_fn(h, params["norm_f"], None, residual=residual, eps=1e-5)
    return h @ params["head"]


def mse_loss(ops, params, x, target):
    return jnp.mean((forward(ops, params, x) - target) ** 2)


def adam_train(ops, params, batches, steps, lr=3e-3, b1=0.9, b2=0.999, eps=1e-8):
    """Plain Adam for `steps` steps over (x, target) batches; returns the loss of every step."""
    grad_fn = jax.jit(jax.value_and_grad(lambda p, x, t: mse_loss(ops, p, x, t)))
    params = jax.tree_util.tree_map(jnp.asarray, params)
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)

    @jax.jit
    def update(params, m, v, grads, t):
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps),
                                        params, m, v)
        return params, m, v

    losses = []
    for step in range(steps):
        x, target = batches[step % len(batches)]
        loss, grads = grad_fn(params, x, target)
        losses.append(float(loss))
        params, m, v = update(params, m, v, grads, step + 1)
    return np.array(losses)
