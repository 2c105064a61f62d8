"""ssmkit._ssmkit.quantize / dequantize against gguf-py's quants module (llama.cpp's own numpy
implementation of its block formats): our decoding equals gguf-py's bit for bit on the same
bytes for every format (random valid bytes, bytes gguf-py quantized, bytes we quantized); for
Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, whose quantizers gguf-py implements bit-exactly with GGML's,
our bytes equal its bytes; for the K-quants (gguf-py has no quantizer) the round trip stays within each
format's error."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GgmlType
from gguf import quants as gguf_quants

from ssmkit import _ssmkit

TYPES = {"q8_0": GgmlType.Q8_0, "q4_0": GgmlType.Q4_0, "q4_k": GgmlType.Q4_K,
         "q5_k": GgmlType.Q5_K, "q6_k": GgmlType.Q6_K, "q4_1": GgmlType.Q4_1,
         "q5_0": GgmlType.Q5_0, "q5_1": GgmlType.Q5_1}
BLOCK = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_k": (256, 144), "q5_k": (256, 176),
         "q6_k": (256, 210), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24)}
# Byte offsets of each block's f16 scales (and mins).
F16_FIELDS = {"q8_0": (0,), "q4_0": (0,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,),
              "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2)}
# The types whose quantizer gguf-py implements (bit-exactly with GGML's).
GGUF_QUANTIZES = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
# rms error / rms value of the round trip on N(0, 1) rows, as tests/quant_test.cpp bounds it
# (measured 0.0052-0.0055, 0.084-0.090, 0.070-0.073, 0.035-0.037, 0.0176-0.0180, 0.076-0.081,
# 0.041-0.045, 0.037-0.039).
MAX_RELATIVE_RMS = {"q8_0": 0.0065, "q4_0": 0.105, "q4_k": 0.085, "q5_k": 0.045, "q6_k": 0.022,
                    "q4_1": 0.1, "q5_0": 0.055, "q5_1": 0.048}


def random_blocks(rng, name, rows, blocks_per_row):
    """Random bytes with finite f16 scales of either sign: (rows, row bytes) uint8."""
    _, block_bytes = BLOCK[name]
    q = rng.integers(0, 256, size=(rows, blocks_per_row, block_bytes), dtype=np.uint8)
    for offset in F16_FIELDS[name]:
        scales = rng.normal(0.0, 0.01, size=(rows, blocks_per_row)).astype(np.float16)
        q[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(rows, blocks_per_row, 2)
    return q.reshape(rows, blocks_per_row * block_bytes)


def assert_bits_equal(got, want, what):
    assert got.dtype == np.float32 and want.dtype == np.float32, what
    assert got.shape == want.shape, what
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), (f"{what}: {differ.sum()} of {differ.size} differ, first at "
                              f"{np.argwhere(differ)[0]}: {got[differ][0]} vs {want[differ][0]}")


@pytest.mark.parametrize("name", TYPES)
def test_dequantize_random_bytes_equals_gguf(name, rng):
    elements, _ = BLOCK[name]
    q = random_blocks(rng, name, 5, 3)
    got = _ssmkit.dequantize(q, name, 3 * elements)
    assert_bits_equal(got, gguf_quants.dequantize(q, TYPES[name]), name)


@pytest.mark.parametrize("name", GGUF_QUANTIZES)
def test_quantize_bytes_equal_gguf(name, rng):
    # Rows of varied scale, a zero block, a constant block, and blocks whose scale is exactly 1
    # (largest magnitude 127 for Q8_0, -8 for Q4_0, -16 for Q5_0; range 15 or 31 from 0 for
    # Q4_1 / Q5_1) holding halves: the quantizers' ties.
    x = (rng.standard_normal((9, 512)) * 10.0 ** rng.uniform(-3, 3, (9, 1))).astype(np.float32)
    x[1, :32] = 0.0
    x[1, 32:64] = 0.75
    halves = np.arange(31, dtype=np.float32) - 15.0 + 0.5
    x[2, :32] = np.concatenate([[127.0], halves])
    x[3, :32] = np.concatenate([[-8.0], halves / 2.0])
    x[4, :32] = np.concatenate([[-16.0], halves])
    x[5, :32] = np.concatenate([[0.0, 15.0], np.arange(30, dtype=np.float32) % 15 + 0.5])
    x[6, :32] = np.concatenate([[0.0, 31.0], np.arange(30, dtype=np.float32) + 0.5])
    ours = _ssmkit.quantize(x, name)
    theirs = gguf_quants.quantize(x, TYPES[name])
    assert ours.dtype == np.uint8 and ours.shape == theirs.shape
    assert np.array_equal(ours, theirs), f"{name}: first differing byte at {np.argwhere(ours != theirs)[0]}"
    assert_bits_equal(_ssmkit.dequantize(theirs, name, 512),
                      gguf_quants.dequantize(theirs, TYPES[name]), name)


@pytest.mark.parametrize("name", TYPES)
def test_round_trip_error_and_gguf_decoding(name, rng):
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    q = _ssmkit.quantize(x, name)
    elements, block_bytes = BLOCK[name]
    assert q.shape == (8, 1024 // elements * block_bytes)
    back = _ssmkit.dequantize(q, name, 1024)
    assert_bits_equal(back, gguf_quants.dequantize(q, TYPES[name]), name)
    relative_rms = np.sqrt(np.mean((back - x) ** 2) / np.mean(x ** 2))
    assert relative_rms <= MAX_RELATIVE_RMS[name], relative_rms


def test_errors():
    x = np.ones((2, 64), np.float32)
    with pytest.raises(ValueError, match="quantize: type: expected one of q8_0.*given 'q3_k'"):
        _ssmkit.quantize(x, "q3_k")
    with pytest.raises(ValueError, match="K a multiple of q4_k's block of 256 elements, given K = 64"):
        _ssmkit.quantize(x, "q4_k")
    q = _ssmkit.quantize(x, "q8_0")
    with pytest.raises(ValueError, match=r"dequantize: q: expected \(M, 34\) bytes .*given \(2, 68\)"):
        _ssmkit.dequantize(q, "q8_0", 32)
    with pytest.raises(ValueError, match="dequantize: K: expected a multiple of q8_0's block"):
        _ssmkit.dequantize(q, "q8_0", 33)
