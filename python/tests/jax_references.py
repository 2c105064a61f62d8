"""Pure-JAX references of every op, written from the math in include/ssmkit/*.hpp with
jax.lax.scan (and jax.lax.associative_scan for the selective scan), differentiated by JAX's own
autodiff. The tests compare ssmkit.jax and the numpy functions with them; bench/ times them as
the peer. Same signatures as ssmkit.jax (the subset each test uses).

Dimension legend: B batch, L length, D channels, N state size, H heads, P head dim, G groups,
K conv width.
"""
import jax
import jax.numpy as jnp

F32 = jnp.float32


def softplus_20(v):
    """softplus, the identity above 20 (as mamba_ssm and ssmkit)."""
    return jnp.where(v > 20.0, v, jnp.log1p(jnp.exp(jnp.minimum(v, 20.0))))


def silu(v):
    return v * jax.nn.sigmoid(v)


def _f32(a):
    return None if a is None else jnp.asarray(a).astype(F32)


def _scan_bc(X, batch, dim, seqlen):
    """B or C in any of its forms as (B, D, N, L)."""
    if X.ndim == 2:  # (D, N) constant
        return jnp.broadcast_to(X[None, :, :, None], (batch, dim, X.shape[1], seqlen))
    if X.ndim == 3:  # (B, N, L)
        return jnp.broadcast_to(X[:, None], (batch, dim) + X.shape[1:])
    groups = X.shape[1]  # (B, G, N, L): channel d reads group d // (D / G)
    return jnp.repeat(X, dim // groups, axis=1)


def _first_order_scan(a, b, h0, method):
    """h_l = a_l h_{l-1} + b_l over the leading axis; returns every h."""
    if method == "associative":
        def combine(x, y):
            return y[0] * x[0], y[0] * x[1] + y[1]
        b = b.at[0].add(a[0] * h0)
        return jax.lax.associative_scan(combine, (a, b))[1]

    def step(h, ab):
        h = ab[0] * h + ab[1]
        return h, h
    return jax.lax.scan(step, h0, (a, b))[1]


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, *, initial_state=None, method="scan"):
    out_dtype = jnp.asarray(u).dtype
    u, delta, A, B, C, D, z, delta_bias, initial_state = map(
        _f32, (u, delta, A, B, C, D, z, delta_bias, initial_state))
    batch, dim, seqlen = u.shape
    dt = delta + (0.0 if delta_bias is None else delta_bias[None, :, None])
    if delta_softplus:
        dt = softplus_20(dt)
    Bf, Cf = _scan_bc(B, batch, dim, seqlen), _scan_bc(C, batch, dim, seqlen)
    # time-major (L, B, D, N)
    a = jnp.exp(dt[:, :, None, :] * A[None, :, :, None]).transpose(3, 0, 1, 2)
    b = (dt * u)[:, :, None, :] * Bf
    b = b.transpose(3, 0, 1, 2)
    h0 = jnp.zeros((batch, dim, A.shape[1]), F32) if initial_state is None else initial_state
    hs = _first_order_scan(a, b, h0, method)
    y = jnp.einsum("lbdn,bdnl->bdl", hs, Cf)
    if D is not None:
        y = y + D[None, :, None] * u
    if z is not None:
        y = y * silu(z)
    out = y.astype(out_dtype)
    return (out, hs[-1]) if return_last_state else out


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=0, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, dt_softplus=False,
                              dt_limit=(0.0, float("inf")), return_final_states=False):
    out_dtype = jnp.asarray(x).dtype
    x, dt, A, B, C, D, z, dt_bias, initial_states = map(
        _f32, (x, dt, A, B, C, D, z, dt_bias, initial_states))
    batch, seqlen, heads, headdim = x.shape
    groups, dstate = B.shape[2], B.shape[3]
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = softplus_20(dt)
    dt = jnp.clip(dt, dt_limit[0], dt_limit[1])
    Bh = jnp.repeat(B, heads // groups, axis=2)  # (B, L, H, N)
    Ch = jnp.repeat(C, heads // groups, axis=2)
    decay = jnp.exp(dt * A)  # (B, L, H)
    if seq_idx is not None:  # a new sequence starts where seq_idx changes: no carry into it
        same = jnp.concatenate([jnp.ones((batch, 1), bool), seq_idx[:, 1:] == seq_idx[:, :-1]], 1)
        keep = same.astype(F32)
    else:
        keep = jnp.ones((batch, seqlen), F32)
    h0 = (jnp.zeros((batch, heads, headdim, dstate), F32) if initial_states is None
          else initial_states)

    def step(h, xs):
        keep_l, decay_l, dt_l, x_l, B_l, C_l = xs
        h = h * (keep_l[:, None, None, None] * decay_l[:, :, None, None]) + \
            (dt_l[:, :, None] * x_l)[..., None] * B_l[:, :, None, :]
        return h, jnp.einsum("bhpn,bhn->bhp", h, C_l)

    xs = (keep.T, decay.transpose(1, 0, 2), dt.transpose(1, 0, 2), x.transpose(1, 0, 2, 3),
          Bh.transpose(1, 0, 2, 3), Ch.transpose(1, 0, 2, 3))
    h_last, y = jax.lax.scan(step, h0, xs)
    y = y.transpose(1, 0, 2, 3)
    if D is not None:
        y = y + (D[:, None] if D.ndim == 1 else D) * x
    if z is not None:
        y = y * silu(z)
    out = y.astype(out_dtype)
    return (out, h_last) if return_final_states else out


def causal_conv1d_fn(x, weight, bias=None, initial_states=None, return_final_states=False,
                     activation=None):
    out_dtype = jnp.asarray(x).dtype
    x, weight, bias, initial_states = map(_f32, (x, weight, bias, initial_states))
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    pad = (jnp.zeros((batch, dim, width - 1), F32) if initial_states is None
           else initial_states)
    xpad = jnp.concatenate([pad, x], axis=2)
    out = sum(weight[None, :, k, None] * xpad[:, :, k:k + seqlen] for k in range(width))
    if bias is not None:
        out = out + bias[None, :, None]
    if activation in ("silu", "swish"):
        out = silu(out)
    out = out.astype(out_dtype)
    final = xpad[:, :, seqlen:].astype(out_dtype)
    return (out, final) if return_final_states else out


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None):
    """One step, x (B, D): returns (out, new_conv_state)."""
    width = weight.shape[1]
    window = jnp.concatenate([conv_state[:, :, -(width - 1):], x[:, :, None].astype(F32)], 2)
    out = jnp.einsum("bdk,dk->bd", window, weight)
    if bias is not None:
        out = out + bias
    if activation in ("silu", "swish"):
        out = silu(out)
    new_state = jnp.concatenate([conv_state[:, :, 1:], x[:, :, None].astype(F32)], 2)
    return out.astype(x.dtype), new_state


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False):
    """Mamba-1 form: state (B, D, N), x, dt, z (B, D), A (D, N), B, C (B, N)."""
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = softplus_20(dt)
    new_state = jnp.exp(dt[..., None] * A) * state + (dt * x)[..., None] * B[:, None, :]
    y = jnp.einsum("bdn,bn->bd", new_state, C)
    if D is not None:
        y = y + D * x
    if z is not None:
        y = y * silu(z)
    return y, new_state


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    out_dtype = jnp.asarray(x).dtype
    x, weight, bias, z = map(_f32, (x, weight, bias, z))
    feat = x.shape[-1]
    group = group_size or feat
    if z is not None and not norm_before_gate:
        x = x * silu(z)
    xg = x.reshape(x.shape[:-1] + (feat // group, group))
    rstd = jax.lax.rsqrt(jnp.mean(xg * xg, axis=-1, keepdims=True) + eps)
    y = (xg * rstd).reshape(x.shape) * weight
    if bias is not None:
        y = y + bias
    if z is not None and norm_before_gate:
        y = y * silu(z)
    return y.astype(out_dtype)


def rms_norm_fn(x, weight, bias, residual=None, prenorm=False, residual_in_fp32=True, eps=1e-6):
    residual_out = _f32(x) + (0.0 if residual is None else _f32(residual))
    out = rmsnorm_fn(residual_out, weight, bias, eps=eps).astype(jnp.asarray(x).dtype)
    return (out, residual_out) if prenorm else out
