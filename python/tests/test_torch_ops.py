"""ssmkit.torch's ops: every forward against a float64 PyTorch reference, every gradient
against float64 autograd of that reference, torch.library.opcheck on every custom op
(schema, fake tensor, autograd registration, AOT dispatch with dynamic shapes), bf16,
strided inputs, the decode steps in place, and bad inputs raising the op's message."""
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import cases  # noqa: E402
import ssmkit  # noqa: E402
import ssmkit.torch as st  # noqa: E402
import torch_references as ref  # noqa: E402
from checks import assert_close  # noqa: E402


def tensors(case, dtype=torch.float32, grad=False):
    """The case's arguments as torch tensors (floating ones in `dtype`)."""
    out = {}
    for k, v in case.args.items():
        if v is None:
            out[k] = None
        elif v.dtype.kind == "f":
            t = torch.tensor(v, dtype=dtype)
            out[k] = t.requires_grad_(grad and k in case.diff)
        else:
            out[k] = torch.tensor(v)
    return out


def outputs(fn, args, kwargs):
    out = fn(**args, **kwargs)
    return out if isinstance(out, tuple) else (out,)


def as_np(t):
    return t.detach().double().numpy()


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_forward(make, rng):
    case = make(rng)
    got = outputs(getattr(st, case.op), tensors(case), case.kwargs)
    want = outputs(getattr(ref, case.op), tensors(case, torch.float64), case.kwargs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == torch.float32 and g.shape == w.shape
        assert_close(as_np(g), as_np(w), 2e-5, f"{case.name} output {i}")


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_gradients_match_float64_autograd(make, rng):
    case = make(rng)
    args, args64 = tensors(case, grad=True), tensors(case, torch.float64, grad=True)
    got = outputs(getattr(st, case.op), args, case.kwargs)
    want = outputs(getattr(ref, case.op), args64, case.kwargs)
    cotangents = [torch.tensor(rng.standard_normal(tuple(o.shape))) for o in want]
    sum(((g.double() * c).sum() for g, c in zip(got, cotangents))).backward()
    sum(((w * c).sum() for w, c in zip(want, cotangents))).backward()
    for k in case.diff:
        assert args[k].grad is not None and args[k].grad.dtype == torch.float32, k
        assert_close(as_np(args[k].grad), as_np(args64[k].grad), 1e-4, f"{case.name} d{k}")


def test_gradients_only_where_asked(rng):
    """Inputs that need no gradient get none (the backward is told which to compute)."""
    case = cases.selective_scan(rng)
    args = tensors(case)
    args["u"].requires_grad_(True)
    out, last = st.selective_scan_fn(**args, **case.kwargs)
    (out.sum() + last.sum()).backward()
    assert args["u"].grad is not None and args["A"].grad is None and args["D"].grad is None
    args64 = tensors(case, torch.float64)
    args64["u"].requires_grad_(True)
    out64, last64 = ref.selective_scan_fn(**args64, **case.kwargs)
    (out64.sum() + last64.sum()).backward()
    assert_close(as_np(args["u"].grad), as_np(args64["u"].grad), 1e-4, "du alone")


# ------------------------------------------------------------------ opcheck


def op_samples(rng):
    """(custom op, args) pairs covering every op in torch.ops.ssmkit, forward and backward."""
    samples = []
    for make in cases.ALL:
        case = make(rng)
        a = tensors(case, grad=True)
        k = case.kwargs
        if case.op == "selective_scan_fn":
            fwd = (a["u"], a["delta"], a["A"], a["B"], a["C"], a["D"], a["z"], a["delta_bias"],
                   a["initial_state"], None, None, True, "sequential", 0, True, False)
            samples.append((torch.ops.ssmkit.selective_scan_fwd, fwd))
            out, last, chunks, _ = torch.ops.ssmkit.selective_scan_fwd(*fwd)
            samples.append((torch.ops.ssmkit.selective_scan_bwd,
                            (torch.randn_like(out), torch.randn_like(last), None,
                             *[t.detach() if t is not None else None for t in fwd[:9]],
                             None, None, chunks.detach(), True, 0, [True] * 9)))
        elif case.op == "mamba_chunk_scan_combined":
            fwd = (a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"],
                   a["initial_states"], a.get("seq_idx"), None, True, 0.0, float("inf"), "auto",
                   k["chunk_size"], True, False)
            samples.append((torch.ops.ssmkit.ssd_fwd, fwd))
            out, final, _ = torch.ops.ssmkit.ssd_fwd(*fwd)
            samples.append((torch.ops.ssmkit.ssd_bwd,
                            (torch.randn_like(out), torch.randn_like(final), None,
                             *[t.detach() if t is not None else None for t in fwd[:11]],
                             *fwd[11:16], [True] * 9)))
        elif case.op == "causal_conv1d_fn":
            fwd = (a["x"], a["weight"], a["bias"], a["initial_states"], None, True, True)
            samples.append((torch.ops.ssmkit.causal_conv1d_fwd, fwd))
            out, final = torch.ops.ssmkit.causal_conv1d_fwd(*fwd)
            samples.append((torch.ops.ssmkit.causal_conv1d_bwd,
                            (torch.randn_like(out), torch.randn_like(final),
                             *[t.detach() for t in fwd[:4]], None, True, [True] * 4)))
        elif case.op == "rmsnorm_fn":
            fwd = (a["x"], a["weight"], a["bias"], a["z"], k["eps"], k["group_size"],
                   k["norm_before_gate"])
            samples.append((torch.ops.ssmkit.rmsnorm_fwd, fwd))
            samples.append((torch.ops.ssmkit.rmsnorm_bwd,
                            (torch.randn_like(a["x"]), *[t.detach() for t in fwd[:4]],
                             *fwd[4:], [True, True, False, True])))
        elif case.op == "rms_norm_fn":
            fwd = (a["x"], a["residual"], a["weight"], a["bias"], k["eps"])
            samples.append((torch.ops.ssmkit.add_rmsnorm_fwd, fwd))
            samples.append((torch.ops.ssmkit.add_rmsnorm_bwd,
                            (torch.randn_like(a["x"]), torch.randn_like(a["x"]),
                             *[t.detach() for t in fwd[:4]], k["eps"], [True] * 4)))
    Bn, D, N, K = 2, 6, 4, 4
    samples.append((torch.ops.ssmkit.selective_state_update,
                    (torch.randn(Bn, D, N), torch.randn(Bn, D), torch.randn(Bn, D),
                     -torch.rand(D, N), torch.randn(Bn, N), torch.randn(Bn, N), torch.randn(D),
                     torch.randn(Bn, D), torch.randn(D), None, True)))
    samples.append((torch.ops.ssmkit.causal_conv1d_update,
                    (torch.randn(Bn, D), torch.randn(Bn, D, K), torch.randn(D, K),
                     torch.randn(D), True)))
    x, w, b = (torch.randn(5, 7, requires_grad=True), torch.randn(3, 7, requires_grad=True),
               torch.randn(3, requires_grad=True))
    samples.append((torch.ops.ssmkit.linear_fwd, (x, w, b)))
    samples.append((torch.ops.ssmkit.linear_bwd, (torch.randn(5, 3), x.detach(), w.detach(),
                                                  b.detach(), [True, True, True])))
    return samples


def test_opcheck_every_op(rng):
    samples = op_samples(rng)
    checked = {str(op) for op, _ in samples}
    registered = {f"ssmkit.{name}" for name in dir(torch.ops.ssmkit)
                  if isinstance(getattr(torch.ops.ssmkit, name), torch._ops.OpOverloadPacket)}
    assert {c.rsplit(".", 1)[0] if c.count(".") > 1 else c for c in checked} >= registered
    for op, args in samples:
        torch.library.opcheck(op, args)


# ------------------------------------------------------------------ linear


@pytest.mark.parametrize("rows", [1, 3, 64, 65, 200])  # the few-rows kernel, and sgemm past 64
def test_linear_matches_float64_with_gradients(rows, rng):
    x64 = torch.tensor(rng.standard_normal((2, rows, 24)), requires_grad=True)
    w64 = torch.tensor(rng.standard_normal((40, 24)) * 0.2, requires_grad=True)
    b64 = torch.tensor(rng.standard_normal(40), requires_grad=True)
    x, w, b = (t.detach().float().requires_grad_(True) for t in (x64, w64, b64))
    out, want = st.linear(x, w, b), torch.nn.functional.linear(x64, w64, b64)
    assert out.shape == (2, rows, 40) and out.dtype == torch.float32
    assert_close(as_np(out), as_np(want), 2e-5, f"linear rows {rows}")
    cot = torch.tensor(rng.standard_normal((2, rows, 40)))
    (out.double() * cot).sum().backward()
    (want * cot).sum().backward()
    for name, got, ref64 in (("dx", x, x64), ("dweight", w, w64), ("dbias", b, b64)):
        assert_close(as_np(got.grad), as_np(ref64.grad), 1e-4, f"linear rows {rows} {name}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_half_weight_read_in_its_dtype(dtype, rng):
    x = torch.tensor(rng.standard_normal((4, 32)), dtype=torch.float32)
    w = torch.tensor(rng.standard_normal((16, 32)) * 0.2, dtype=torch.float32).to(dtype)
    want = torch.nn.functional.linear(x.double(), w.double())  # the rounded weight, exactly
    assert_close(as_np(st.linear(x, w)), as_np(want), 2e-5, f"linear {dtype} weight")


def test_linear_bad_shape_raises_the_op_message():
    with pytest.raises(ssmkit.InvalidArgumentError, match=r"linear: x: expected shape"):
        st.linear(torch.randn(3, 8), torch.randn(5, 7))


# ------------------------------------------------------------------ dtypes and layouts


@pytest.mark.parametrize("make", [cases.selective_scan, cases.ssd, cases.conv1d, cases.rmsnorm,
                                  cases.add_rmsnorm],
                         ids=["scan", "ssd", "conv1d", "rmsnorm", "add_rmsnorm"])
def test_bfloat16(make, rng):
    """bf16 activations (the small parameters stay f32, as in mamba_ssm): outputs in bf16
    against the float64 reference on the same bf16-rounded inputs."""
    case = make(rng)
    small = {"A", "D", "delta_bias", "dt_bias", "weight", "bias", "initial_state",
             "initial_states", "residual"}
    args = {k: (v if v is None or k in small or not v.is_floating_point()
                else v.to(torch.bfloat16)) for k, v in tensors(case).items()}
    got = outputs(getattr(st, case.op), args, case.kwargs)
    args64 = {k: v if v is None or not v.is_floating_point() else v.double()
              for k, v in args.items()}
    want = outputs(getattr(ref, case.op), args64, case.kwargs)
    assert got[0].dtype == torch.bfloat16
    assert_close(as_np(got[0]), as_np(want[0]), 1e-2, f"{case.name} bf16 out")


def test_strided_inputs_read_in_place(rng):
    """mamba_ssm's Mamba splits xz into x and z views (strided batch, dense time): the scan
    reads them as they are; a transposed B (strided last dim) is copied, not refused."""
    case = cases.selective_scan(rng)
    a = tensors(case)
    xz = torch.cat([a["u"], a["z"]], dim=1)
    u, z = xz.chunk(2, dim=1)
    assert not u.is_contiguous()
    B_t = a["B"].transpose(1, 2).contiguous().transpose(1, 2)
    assert B_t.stride(-1) != 1
    got = st.selective_scan_fn(u, a["delta"], a["A"], B_t, a["C"], a["D"], z, a["delta_bias"],
                               delta_softplus=True, initial_state=a["initial_state"])
    want = st.selective_scan_fn(**{**a, "B": a["B"]}, delta_softplus=True)
    assert torch.equal(got, want)


def test_raw_op_refuses_a_strided_last_dimension(rng):
    a = tensors(cases.selective_scan(rng))
    u = a["u"].transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(ValueError, match="u"):
        torch.ops.ssmkit.selective_scan_fwd(u, a["delta"], a["A"], a["B"], a["C"], None, None,
                                            None, None, None, None, False, "sequential", 0,
                                            False, False)


# ------------------------------------------------------------------ decode steps


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_state_update_mamba1_in_place(state_dtype, rng):
    Bn, D, N = 3, 8, 4
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    state = torch.randn(Bn, D, N, generator=g).to(state_dtype)
    args = dict(x=torch.randn(Bn, D, generator=g), dt=torch.randn(Bn, D, generator=g),
                A=-torch.rand(D, N, generator=g) - 0.1, B=torch.randn(Bn, N, generator=g),
                C=torch.randn(Bn, N, generator=g), D=torch.randn(D, generator=g),
                z=torch.randn(Bn, D, generator=g), dt_bias=torch.randn(D, generator=g))
    want, want_state = ref.selective_state_update(state.double(), dt_softplus=True,
                                                  **{k: v.double() for k, v in args.items()})
    out = st.selective_state_update(state, **args, dt_softplus=True)
    tol = 2e-5 if state_dtype == torch.float32 else 1e-2
    assert_close(as_np(out), as_np(want), tol, "out")
    assert state.dtype == state_dtype
    assert_close(as_np(state), as_np(want_state), tol, "state updated in place")


def test_state_update_mamba2_takes_mamba_ssm_broadcasts(rng):
    """Mamba2.step's call: A (H, P, N), dt (B, H, P), dt_bias and D (H, P), all stride-0
    broadcasts of per-head values."""
    Bn, H, P, G, N = 2, 4, 3, 2, 5
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    state = torch.randn(Bn, H, P, N, generator=g)
    x, z = torch.randn(Bn, H, P, generator=g), torch.randn(Bn, H, P, generator=g)
    dt, A = torch.randn(Bn, H, generator=g), -torch.rand(H, generator=g) - 0.1
    Bm, Cm = torch.randn(Bn, G, N, generator=g), torch.randn(Bn, G, N, generator=g)
    D, dt_bias = torch.randn(H, generator=g), torch.randn(H, generator=g)
    want, want_state = ref.selective_state_update(
        state.double(), x.double(), dt.double(), A.double(), Bm.double(), Cm.double(),
        D.double(), z.double(), dt_bias.double(), dt_softplus=True)
    out = st.selective_state_update(
        state, x, dt[..., None].expand(-1, -1, P), A[:, None, None].expand(-1, P, N), Bm, Cm,
        D[:, None].expand(-1, P), z=z, dt_bias=dt_bias[:, None].expand(-1, P), dt_softplus=True)
    assert_close(as_np(out), as_np(want), 2e-5, "out")
    assert_close(as_np(state), as_np(want_state), 2e-5, "state")
    with pytest.raises(NotImplementedError, match="A"):
        st.selective_state_update(state, x, dt, torch.randn(H, P, N), Bm, Cm)


@pytest.mark.parametrize("steps", [0, 3])
def test_conv1d_update_in_place(steps, rng):
    Bn, D, K = 2, 6, 4
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    x = torch.randn(Bn, D, steps, generator=g) if steps else torch.randn(Bn, D, generator=g)
    state = torch.randn(Bn, D, K, generator=g)
    w, b = torch.randn(D, K, generator=g), torch.randn(D, generator=g)
    want, want_state = ref.causal_conv1d_update(x.double(), state.double(), w.double(),
                                                b.double(), "silu")
    out = st.causal_conv1d_update(x, state, w, b, "silu")
    assert_close(as_np(out), as_np(want), 2e-5, "out")
    assert_close(as_np(state), as_np(want_state), 2e-5, "conv_state")


# ------------------------------------------------------------------ errors


def test_bad_shape_raises_the_op_message(rng):
    a = tensors(cases.selective_scan(rng))
    with pytest.raises(ssmkit.InvalidArgumentError, match=r"delta: expected shape"):
        st.selective_scan_fn(a["u"], a["delta"][..., :-1], a["A"], a["B"], a["C"])
    s = tensors(cases.ssd(rng))
    with pytest.raises(ValueError, match="dt"):
        st.mamba_chunk_scan_combined(s["x"], s["dt"][:, :, :-1], s["A"], s["B"], s["C"])


def test_bad_dtype_raises(rng):
    a = tensors(cases.conv1d(rng))
    with pytest.raises((TypeError, ValueError), match="x"):
        st.causal_conv1d_fn(a["x"].to(torch.int32), a["weight"])
    with pytest.raises((TypeError, ValueError, NotImplementedError), match="x"):
        st.causal_conv1d_fn(a["x"].half(), a["weight"])  # the CPU kernels have no f16


def test_unsupported_arguments_raise(rng):
    """mamba_ssm arguments ssmkit does not implement (packed sequences: test_torch_varlen)."""
    s = tensors(cases.ssd(rng))
    with pytest.raises(NotImplementedError, match="state_dtype"):
        st.mamba_chunk_scan_combined(s["x"], s["dt"], s["A"], s["B"], s["C"],
                                     state_dtype=torch.bfloat16)
    c = tensors(cases.conv1d(rng))
    with pytest.raises(NotImplementedError, match="cache_seqlens"):
        st.causal_conv1d_update(c["x"][..., 0], torch.zeros(2, 6, 3), c["weight"],
                                cache_seqlens=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="dropout_p"):
        st.rms_norm_fn(c["x"], torch.ones(10), None, dropout_p=0.1)
    with pytest.raises(ValueError, match="activation"):
        st.causal_conv1d_fn(c["x"], c["weight"], activation="relu")


def test_importing_ssmkit_does_not_import_torch():
    code = "import sys, ssmkit; ssmkit.selective_scan_fn; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_numpy_api_unchanged_by_torch_tensors_elsewhere(rng):
    """The numpy functions still return numpy arrays (the binding is shared)."""
    case = cases.conv1d(rng)
    out = ssmkit.causal_conv1d_fn(**case.args, activation="silu")
    assert isinstance(out, np.ndarray)
