"""Shapes of the outputs the ops derive from their inputs (final states), shared by the numpy
and JAX layers. They never raise: for malformed inputs they return some shape and leave the
C++ op to reject the call with its own message."""


def _dim(shape, i, default=1):
    try:
        return int(shape[i])
    except (IndexError, TypeError, ValueError):
        return default


def scan_state(u_shape, A_shape):
    """(B, D, N) of the selective scan's final state: u (B, D, L), A (D, N)."""
    return (_dim(u_shape, 0), _dim(u_shape, 1), _dim(A_shape, -1))


def ssd_state(x_shape, B_shape):
    """(B, H, P, N) of the SSD's final states: x (B, L, H, P), B (B, L, G, N)."""
    return (_dim(x_shape, 0), _dim(x_shape, 2), _dim(x_shape, 3), _dim(B_shape, -1))


def varlen_states(cu_seqlens_shape, state_shape):
    """(S, ...) of the per-sequence states: cu_seqlens (S + 1), a state (B, ...)."""
    return (max(_dim(cu_seqlens_shape, 0, 2) - 1, 0), *tuple(state_shape)[1:])


def conv_state(x_shape, weight_shape):
    """(B, D, K-1) of the causal conv1d's final states: x (B, D, L), weight (D, K)."""
    return (_dim(x_shape, 0), _dim(x_shape, 1), max(_dim(weight_shape, -1, 2) - 1, 0))


def rows(shape):
    """(M, E) of an (..., E) array seen as rows."""
    e = _dim(shape, -1)
    m = 1
    for s in tuple(shape)[:-1]:
        m *= int(s)
    return (m, e)


def activation_is_silu(fn, activation):
    if activation in (None, "silu", "swish"):
        return activation is not None
    raise ValueError(f"{fn}: activation: expected None, 'silu' or 'swish', given {activation!r}")


SCAN_ALGORITHMS = {"sequential": 0, "chunked": 1, "blelloch": 2, "hillis-steele": 3,
                   "log-space": 4}
SSD_ALGORITHMS = {"auto": 0, "chunked": 1, "sequential": 2}


def algorithm_index(fn, table, name):
    if name not in table:
        raise ValueError(f"{fn}: algorithm: expected one of {sorted(table)}, given {name!r}")
    return table[name]


def no_varlen(fn, **unsupported):
    """Raises for mamba_ssm arguments ssmkit does not implement (given as not None / True)."""
    for name, value in unsupported.items():
        if value is not None and value is not False:
            raise NotImplementedError(f"{fn}: {name} is not supported by ssmkit (see docs/ops.md)")
