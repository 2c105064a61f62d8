"""Random inputs for every op at small shapes (never all-zero), shared by the numpy and JAX
tests: each case holds the arguments by name, which of them are differentiable, and how to
call ssmkit and the pure-JAX reference on them."""
import dataclasses

import numpy as np

import jax_references as ref


@dataclasses.dataclass
class Case:
    name: str
    args: dict                     # name -> numpy array (or None)
    diff: tuple                    # differentiable argument names
    kwargs: dict                   # static keyword arguments of the op
    op: str                        # the function name in ssmkit / ssmkit.jax / references
    vmap_arg: str                  # an argument to batch under vmap
    outputs: int = 2               # out and a final state, or just out
    batch_args: tuple = ()         # the arguments whose leading dim is the batch (sharded)


def normal(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def uniform(rng, lo, hi, *shape):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def selective_scan(rng, Bn=2, D=8, L=16, N=4, bc="variable"):
    if bc == "constant":
        B, C = normal(rng, D, N), normal(rng, D, N)
    elif bc == "grouped":
        B, C = normal(rng, Bn, 2, N, L), normal(rng, Bn, 2, N, L)
    else:
        B, C = normal(rng, Bn, N, L), normal(rng, Bn, N, L)
    args = dict(u=normal(rng, Bn, D, L), delta=uniform(rng, -2.0, 0.5, Bn, D, L),
                A=-np.exp(uniform(rng, -1.0, 1.5, D, N)), B=B, C=C, D=normal(rng, D),
                z=normal(rng, Bn, D, L), delta_bias=uniform(rng, -0.5, 0.5, D),
                initial_state=normal(rng, Bn, D, N))
    batch_args = ("u", "delta", "z", "initial_state") + (() if bc == "constant" else ("B", "C"))
    return Case(f"selective_scan_{bc}", args, tuple(args),
                dict(delta_softplus=True, return_last_state=True), "selective_scan_fn", "u",
                batch_args=batch_args)


def ssd(rng, Bn=2, L=12, H=4, P=4, G=2, N=4, seq_idx=False):
    args = dict(x=normal(rng, Bn, L, H, P), dt=uniform(rng, -3.0, -0.5, Bn, L, H),
                A=-np.exp(uniform(rng, 0.0, 1.5, H)), B=normal(rng, Bn, L, G, N),
                C=normal(rng, Bn, L, G, N), D=normal(rng, H), z=normal(rng, Bn, L, H, P),
                dt_bias=uniform(rng, -0.5, 0.5, H), initial_states=normal(rng, Bn, H, P, N))
    diff = tuple(args)
    if seq_idx:
        args["seq_idx"] = np.cumsum(rng.uniform(size=(Bn, L)) < 0.2, axis=1).astype(np.int32)
    return Case("ssd" + ("_seq_idx" if seq_idx else ""), args, diff,
                dict(chunk_size=5, dt_softplus=True, return_final_states=True),
                "mamba_chunk_scan_combined", "x",
                batch_args=("x", "dt", "B", "C", "z", "initial_states") +
                (("seq_idx",) if seq_idx else ()))


def conv1d(rng, Bn=2, D=6, L=10, K=4):
    args = dict(x=normal(rng, Bn, D, L), weight=normal(rng, D, K, scale=0.5),
                bias=normal(rng, D, scale=0.5), initial_states=normal(rng, Bn, D, K - 1))
    return Case("conv1d", args, tuple(args), dict(return_final_states=True, activation="silu"),
                "causal_conv1d_fn", "x", batch_args=("x", "initial_states"))


def rmsnorm(rng, M=6, E=16, group_size=8, norm_before_gate=False, lead=2):
    args = dict(x=normal(rng, lead, M // lead, E), weight=normal(rng, E),
                bias=normal(rng, E, scale=0.3), z=normal(rng, lead, M // lead, E))
    return Case(f"rmsnorm_gate_{'after' if norm_before_gate else 'before'}", args, tuple(args),
                dict(eps=1e-5, group_size=group_size, norm_before_gate=norm_before_gate),
                "rmsnorm_fn", "x", outputs=1, batch_args=("x", "z"))


def add_rmsnorm(rng, M=6, E=16):
    args = dict(x=normal(rng, M, E), weight=normal(rng, E), bias=normal(rng, E, scale=0.3),
                residual=normal(rng, M, E))
    return Case("add_rmsnorm", args, tuple(args), dict(eps=1e-5, prenorm=True), "rms_norm_fn",
                "x", batch_args=("x", "residual"))


ALL = [selective_scan, lambda r: selective_scan(r, bc="constant"),
       lambda r: selective_scan(r, bc="grouped"), ssd, lambda r: ssd(r, seq_idx=True), conv1d,
       rmsnorm, lambda r: rmsnorm(r, norm_before_gate=True), add_rmsnorm]
NAMES = ["scan_variable", "scan_constant", "scan_grouped", "ssd", "ssd_seq_idx", "conv1d",
         "rmsnorm_gate_first", "rmsnorm_norm_first", "add_rmsnorm"]


def call(module, case, args=None):
    """The op of `case` from `module` (ssmkit.jax or jax_references) on args (default the
    case's); always a tuple of outputs."""
    out = getattr(module, case.op)(**(case.args if args is None else args), **case.kwargs)
    return out if isinstance(out, tuple) else (out,)


def reference(case, args=None):
    return call(ref, case, args)
