"""ssmkit.torch on CUDA tensors (needs a GPU and ssmkit built with its CUDA backend; skipped
otherwise): every op and gradient against the same op on the CPU, launched on the current
torch stream (a side stream here), a decode step in place, a Mamba-2 model's logits and
generate(), accelerate() on a transformers model, and the device-mix error."""
import pytest

torch = pytest.importorskip("torch")

import cases  # noqa: E402
import ssmkit  # noqa: E402
import ssmkit.torch as st  # noqa: E402
from checks import assert_close  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and ssmkit._ssmkit.built_with_cuda),
    reason="needs a CUDA GPU and ssmkit built with its CUDA backend")

# The CUDA kernels' products run in TF32 for SSD (docs/cuda.md): looser there.
TOL = {"mamba_chunk_scan_combined": 3e-3}


def tensors(case, device, grad=False):
    out = {}
    for k, v in case.args.items():
        t = None if v is None else torch.tensor(v, device=device)
        if t is not None and t.is_floating_point():
            t.requires_grad_(grad and k in case.diff)
        out[k] = t
    return out


def outputs(case, args):
    out = getattr(st, case.op)(**args, **case.kwargs)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("make", cases.ALL, ids=cases.NAMES)
def test_op_and_gradients_on_a_side_stream_match_cpu(make, rng):
    case = make(rng)
    tol = TOL.get(case.op, 1e-4)
    cpu, gpu = tensors(case, "cpu", grad=True), tensors(case, "cuda", grad=True)
    want = outputs(case, cpu)
    cotangents = [torch.randn_like(o) for o in want]
    sum((o * c).sum() for o, c in zip(want, cotangents)).backward()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = outputs(case, gpu)
        sum((o * c.cuda()).sum() for o, c in zip(got, cotangents)).backward()
    stream.synchronize()
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.device.type == "cuda"
        assert_close(g.detach().cpu().numpy(), w.detach().numpy(), tol, f"{case.name} out {i}")
    for k in case.diff:
        assert_close(gpu[k].grad.cpu().numpy(), cpu[k].grad.numpy(), 10 * tol,
                     f"{case.name} d{k}")


def test_decode_steps_in_place_on_cuda(rng):
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    Bn, H, P, G, N = 2, 4, 8, 2, 16
    args = [torch.randn(Bn, H, P, generator=g), torch.randn(Bn, H, generator=g),
            -torch.rand(H, generator=g), torch.randn(Bn, G, N, generator=g),
            torch.randn(Bn, G, N, generator=g), torch.randn(H, generator=g)]
    state = torch.randn(Bn, H, P, N, generator=g)
    state_gpu = state.cuda()
    want = st.selective_state_update(state, *args, dt_softplus=True)
    got = st.selective_state_update(state_gpu, *[a.cuda() for a in args], dt_softplus=True)
    assert_close(got.cpu().numpy(), want.numpy(), 1e-5, "out")
    assert_close(state_gpu.cpu().numpy(), state.numpy(), 1e-5, "state")


def test_mamba2_model_and_generate_on_cuda():
    torch.manual_seed(0)
    config = st.MambaConfig(d_model=64, n_layer=2, vocab_size=256, ssm_cfg={
        "layer": "Mamba2", "d_state": 16, "headdim": 16, "ngroups": 2, "chunk_size": 16})
    cpu = st.MambaLMHeadModel(config)
    gpu = st.MambaLMHeadModel(config, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    ids = torch.randint(0, 256, (2, 40))
    with torch.no_grad():
        assert_close(gpu(ids.cuda()).logits.cpu().numpy(), cpu(ids).logits.numpy(), 3e-3,
                     "logits")
    out = gpu.generate(ids[:, :8].cuda(), max_length=16)
    assert out.shape == (2, 16) and out.device.type == "cuda"


def test_accelerate_on_cuda():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=128, hidden_size=32, state_size=8,
                                      num_hidden_layers=2)
    ref = transformers.MambaForCausalLM(config)
    model = st.accelerate(transformers.MambaForCausalLM(config).cuda())
    model.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 128, (2, 20))
    with torch.no_grad():
        assert_close(model(ids.cuda()).logits.cpu().numpy(), ref(ids).logits.numpy(), 1e-4,
                     "logits")


def test_device_mix_raises_the_op_message(rng):
    a = tensors(cases.selective_scan(rng), "cuda")
    with pytest.raises(ValueError, match="B"):
        st.selective_scan_fn(a["u"], a["delta"], a["A"], a["B"].cpu(), a["C"])


def test_packed_scan_and_conv_on_a_side_stream_match_cpu(rng):
    """Packed sequences on CUDA tensors: the scan with cu_seqlens (per-sequence initial
    states, varlen states and their gradients) and conv1d with seq_idx, against the CPU."""
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    lengths, D, N, K = (1, 7, 16, 3, 21), 6, 4, 4
    L, S = sum(lengths), len(lengths)
    cu = torch.tensor((0,) + lengths).cumsum(0).to(torch.int32)
    seq_idx = torch.repeat_interleave(torch.arange(S, dtype=torch.int32),
                                      torch.tensor(lengths))[None]
    scan = dict(u=torch.randn(1, D, L, generator=g), delta=torch.rand(1, D, L, generator=g) - 1,
                A=-torch.rand(D, N, generator=g) - 0.1, B=torch.randn(1, N, L, generator=g),
                C=torch.randn(1, N, L, generator=g), D=torch.randn(D, generator=g),
                z=torch.randn(1, D, L, generator=g), initial_state=torch.randn(S, D, N,
                                                                               generator=g))
    conv = dict(x=torch.randn(1, D, L, generator=g), weight=torch.randn(D, K, generator=g),
                bias=torch.randn(D, generator=g))

    def run(device):
        a = {k: v.to(device).requires_grad_() for k, v in scan.items()}
        c = {k: v.to(device).requires_grad_() for k, v in conv.items()}
        out, varlen = st.selective_scan_fn(**a, delta_softplus=True, cu_seqlens=cu.to(device),
                                           return_varlen_states=True)
        y = st.causal_conv1d_fn(**c, seq_idx=seq_idx.to(device), activation="silu")
        cot = [torch.randn(t.shape, generator=torch.Generator().manual_seed(i)).to(device)
               for i, t in enumerate((out, varlen, y))]
        sum((t * w).sum() for t, w in zip((out, varlen, y), cot)).backward()
        return [out, varlen, y] + [t.grad for t in (*a.values(), *c.values())]

    want = run("cpu")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = run("cuda")
    stream.synchronize()
    for i, (x, w) in enumerate(zip(got, want)):
        assert x.device.type == "cuda"
        assert_close(x.detach().cpu().numpy(), w.detach().numpy(), 1e-4, f"tensor {i}")


def test_packed_ssd_with_cu_seqlens_is_cpu_only(rng):
    s = tensors(cases.ssd(rng, Bn=1), "cuda")
    cu = torch.tensor([0, 5, 12], dtype=torch.int32, device="cuda")
    with pytest.raises(NotImplementedError, match="cu_seqlens"):
        st.mamba_chunk_scan_combined(s["x"], s["dt"], s["A"], s["B"], s["C"], cu_seqlens=cu)


def test_float16_scan_on_cuda(rng):
    """f16 activations, which the CUDA scan takes (the CPU kernels do not): against the CPU's
    f32 run on the same f16-rounded inputs, with gradients in f16."""
    case = cases.selective_scan(rng)
    small = {"A", "D", "delta_bias", "initial_state"}
    gpu = {k: v if v is None or k in small else v.half()
           for k, v in tensors(case, "cuda").items()}
    cpu = {k: None if v is None else v.float().cpu() for k, v in gpu.items()}
    for args in (gpu, cpu):
        args["u"].requires_grad_()
    got, want = outputs(case, gpu), outputs(case, cpu)
    assert got[0].dtype == torch.float16
    assert_close(got[0].float().cpu().detach().numpy(), want[0].detach().numpy(), 1e-2,
                 "f16 out")
    got[0].float().sum().backward()
    want[0].sum().backward()
    assert gpu["u"].grad.dtype == torch.float16
    assert_close(gpu["u"].grad.float().cpu().numpy(), cpu["u"].grad.numpy(), 2e-2, "f16 du")
