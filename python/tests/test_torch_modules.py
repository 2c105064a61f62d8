"""ssmkit.torch's modules: mamba_ssm's parameter names (state-spaces checkpoints load with
strict=True), logits and greedy decoding of the fixture checkpoints equal to what
transformers recorded, loss gradients equal to transformers' on the same weights, and
torch.compile(fullgraph=True) of a Mamba and a Mamba-2 block, forward and backward, equal to
eager.

Dimension legend: B batch, L length, V vocab (304 in the fixtures), E d_model."""
import os

import pytest

torch = pytest.importorskip("torch")

import ssmkit.torch as st  # noqa: E402
from checks import assert_close  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "models")


def fixture(name):
    return os.path.join(MODELS, name)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("arch", ["mamba1", "mamba2"])
def test_state_spaces_checkpoint_logits_and_greedy_decode(arch):
    """from_pretrained on the state-spaces fixture (strict state dict load); every prefill
    position's logits, the greedy continuation of generate() and the logits of each decode
    step against transformers' recording for the same weights."""
    model = st.MambaLMHeadModel.from_pretrained(fixture(f"{arch}-ss"))
    want = load_file(os.path.join(fixture(f"{arch}-hf"), "expected.safetensors"))
    prompts = sorted({k.split(".")[0] for k in want})
    with torch.no_grad():
        for p in prompts:
            ids = want[f"{p}.ids"].long()[None]
            logits = model(ids).logits[0]
            assert rel(logits, want[f"{p}.prefill_logits"]) < 1e-4, p
            steps = len(want[f"{p}.greedy_ids"])
            out = model.generate(ids, max_length=ids.shape[1] + steps, return_dict_in_generate=True,
                                 output_scores=True)
            assert torch.equal(out.sequences[0, ids.shape[1]:], want[f"{p}.greedy_ids"].long()), p
            scores = torch.stack(out.scores)[:, 0]
            assert rel(scores, want[f"{p}.decode_logits"]) < 1e-4, p


def test_save_and_load_pytorch_model_bin(tmp_path):
    model = st.MambaLMHeadModel.from_pretrained(fixture("mamba2-ss"))
    model.save_pretrained(tmp_path)
    assert (tmp_path / "pytorch_model.bin").exists()
    again = st.MambaLMHeadModel.from_pretrained(tmp_path)
    ids = torch.randint(0, 300, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


# mamba_ssm's parameter names for one layer of each mixer (the state-spaces checkpoints').
MAMBA1_NAMES = {"in_proj.weight", "conv1d.weight", "conv1d.bias", "x_proj.weight",
                "dt_proj.weight", "dt_proj.bias", "A_log", "D", "out_proj.weight"}
MAMBA2_NAMES = {"in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
                "norm.weight", "out_proj.weight"}


def test_parameter_names_and_shapes_are_mamba_ssm_s():
    m1 = st.Mamba(d_model=48, d_state=8, d_conv=4, expand=2)
    assert set(dict(m1.named_parameters())) == MAMBA1_NAMES
    assert m1.A_log.shape == (96, 8) and m1.x_proj.weight.shape == (3 + 16, 96)
    m2 = st.Mamba2(d_model=48, d_state=16, headdim=12, ngroups=2)
    assert set(dict(m2.named_parameters())) == MAMBA2_NAMES
    assert m2.in_proj.weight.shape == (2 * 96 + 2 * 2 * 16 + 8, 48)
    assert m2.conv1d.weight.shape == (96 + 64, 1, 4) and m2.A_log.shape == (8,)
    block = st.Block(48, st.Mamba, torch.nn.Identity, norm_cls=st.RMSNorm, fused_add_norm=True)
    assert set(dict(block.named_parameters())) == {"norm.weight"} | {
        "mixer." + n for n in MAMBA1_NAMES}


def hf_model(arch):
    transformers = pytest.importorskip("transformers")
    cls = transformers.MambaForCausalLM if arch == "mamba1" else transformers.Mamba2ForCausalLM
    return cls.from_pretrained(fixture(f"{arch}-hf"), dtype=torch.float32)


@pytest.mark.parametrize("arch", ["mamba1", "mamba2"])
def test_loss_gradients_equal_transformers(arch):
    """The same weights in ssmkit.torch's MambaLMHeadModel and in transformers' model (its
    torch path): the cross-entropy loss and its gradient for every parameter."""
    theirs = hf_model(arch)
    if arch == "mamba2" and not hasattr(theirs.backbone.layers[0].mixer.norm, "group_size"):
        pytest.skip("this transformers' Mamba-2 gated norm spans all groups (mamba_ssm's, and "
                    "ssmkit's, is per group): the fixture's n_groups = 2 tells them apart")
    ours = st.MambaLMHeadModel.from_pretrained(fixture(f"{arch}-ss"))
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(5))
    loss = torch.nn.functional.cross_entropy(ours(ids).logits[:, :-1].flatten(0, 1),
                                             ids[:, 1:].flatten())
    want = theirs(ids, labels=ids).loss
    assert abs(loss.item() - want.item()) < 1e-5 * abs(want.item())
    loss.backward()
    want.backward()
    theirs_params = {n.replace("backbone.embeddings.", "backbone.embedding."): p
                     for n, p in theirs.named_parameters()}
    for name, p in ours.named_parameters():
        assert_close(p.grad.numpy(), theirs_params[name].grad.numpy(), 1e-4, name)


# ------------------------------------------------------------------ torch.compile


def block(arch):
    torch.manual_seed(3)
    if arch == "mamba1":
        mixer = lambda dim: st.Mamba(dim, d_state=8, layer_idx=0)  # noqa: E731
    else:
        mixer = lambda dim: st.Mamba2(dim, d_state=16, headdim=16, ngroups=2,  # noqa: E731
                                      chunk_size=8, layer_idx=0)
    return st.Block(32, mixer, torch.nn.Identity, norm_cls=st.RMSNorm, fused_add_norm=True,
                    residual_in_fp32=True)


@pytest.mark.parametrize("packed", [False, True], ids=["batch", "cu_seqlens"])
@pytest.mark.parametrize("arch", ["mamba1", "mamba2"])
def test_compile_fullgraph_block_equals_eager(arch, packed):
    """Two rows, or one row packing three sequences (cu_seqlens, which the block hands to its
    mixer)."""
    torch._dynamo.reset()
    model = block(arch)
    rows = 1 if packed else 2
    x = torch.randn(rows, 20, 32, generator=torch.Generator().manual_seed(7))
    residual = torch.randn(rows, 20, 32, generator=torch.Generator().manual_seed(8))
    mixer_kwargs = {"cu_seqlens": torch.tensor([0, 7, 8, 20], dtype=torch.int32)} if packed \
        else {}

    def run(fn):
        model.zero_grad()
        xi, ri = x.clone().requires_grad_(), residual.clone().requires_grad_()
        h, r = fn(xi, ri, **mixer_kwargs)
        ((h * h).sum() + (r * r).sum()).backward()
        return [h, r, xi.grad, ri.grad] + [p.grad.clone() for p in model.parameters()]

    eager = run(model)
    compiled = run(torch.compile(model, fullgraph=True))
    for i, (c, e) in enumerate(zip(compiled, eager)):
        assert rel(c, e) < 1e-5, f"tensor {i}"
