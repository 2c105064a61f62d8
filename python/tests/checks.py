"""Comparison helpers: ||got - want|| / ||want|| in float64, NaN or inf never passing."""
import numpy as np


def rel_err(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shape {got.shape}, want {want.shape}"
    if not np.all(np.isfinite(got)):
        return np.inf
    norm = np.linalg.norm(want)
    return np.linalg.norm(got - want) / (norm if norm > 0 else 1.0)


def assert_close(got, want, tol, what=""):
    err = rel_err(got, want)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:g}"
