"""Token ids from Python values: checked here for what only Python can get wrong (a dtype that is
not an integer, a shape that is neither a sequence nor a batch, a value that would wrap in
int32); the engine checks the rest (the vocabulary, the batch size) with its own messages."""
import numbers

import numpy as np

from ._ssmkit import InvalidArgumentError

_INT32 = np.iinfo(np.int32)


def _int32(a, what):
    """a (an integer numpy array) as a C-contiguous int32 copy, refusing values int32 cannot
    hold (they are outside every vocabulary)."""
    if a.size and (a.min() < _INT32.min or a.max() > _INT32.max):
        bad = a[(a < _INT32.min) | (a > _INT32.max)].flat[0]
        raise InvalidArgumentError(f"{what}: token {int(bad)} outside the vocabulary (not an int32)")
    return np.ascontiguousarray(a, dtype=np.int32)


def _integers(value, what):
    """value as an integer numpy array: TypeError for anything else (floats, bools, strings)."""
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f":  # [] and np.array([]) are float64
            return a.astype(np.int64)
        raise TypeError(f"{what}: expected integer token ids, given dtype {a.dtype}")
    return a


def sequence(ids, what="ids"):
    """One sequence of token ids (a list of ints or a 1-D integer array): (L) int32."""
    a = _integers(ids, what)
    if a.ndim != 1:
        raise InvalidArgumentError(f"{what}: expected a sequence of token ids (L), given shape "
                                   f"{a.shape}")
    return _int32(a, what)


def batch(ids, what="ids"):
    """Prompts for a prefill: one sequence (list of ints, (L) array), a batch of equal lengths
    ((B, L) array) or a list of sequences of any lengths. Returns the right-padded (B, Lmax)
    int32 matrix and the (B) int64 lengths."""
    if isinstance(ids, np.ndarray) or (isinstance(ids, (list, tuple)) and ids and
                                       all(isinstance(t, numbers.Integral) for t in ids)):
        a = _integers(ids, what)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2:
            raise InvalidArgumentError(f"{what}: expected (L) or (B, L) token ids, given shape "
                                       f"{a.shape}")
        prompts = list(a)
    elif isinstance(ids, (list, tuple)):
        prompts = [sequence(p, f"{what}[{b}]") for b, p in enumerate(ids)]
    else:
        raise TypeError(f"{what}: expected token ids (a list of ints, a list of lists, or a numpy "
                        f"integer array), given {type(ids).__name__}")
    if not prompts:
        raise InvalidArgumentError(f"{what}: expected at least one prompt, given none")
    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    for b, n in enumerate(lengths):
        if n == 0:
            raise InvalidArgumentError(f"{what}: prompt {b} is empty (a prefill needs >= 1 token)")
    tokens = np.zeros((len(prompts), int(lengths.max())), dtype=np.int32)
    for b, p in enumerate(prompts):
        tokens[b, :len(p)] = _int32(np.asarray(p), what)
    return tokens, lengths
