"""ssmkit.torch.accelerate on tiny random transformers checkpoints (the fixture Mamba and
Mamba-2 models, the engine's hybrid fixtures reusing their mixers: Bamba, Falcon-H1,
GraniteMoeHybrid, Jamba, Nemotron-H, Zamba2, and a random FalconMamba): logits, loss
and every parameter's gradient equal the unaccelerated model's, greedy generate() gives the
same tokens through the same cache, the model keeps its class and state dict, and the
profiler shows ssmkit's kernels doing the work in forward, backward and decoding.

Dimension legend: B batch, L length, V vocab."""
import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import ssmkit.torch as st  # noqa: E402
from checks import assert_close  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from make_model_fixtures import randomize  # noqa: E402


def fixture(arch):
    cls = transformers.MambaForCausalLM if arch == "mamba" else transformers.Mamba2ForCausalLM
    directory = {"mamba": "mamba1-hf", "mamba2": "mamba2-hf"}[arch]
    return cls.from_pretrained(os.path.join(MODELS, directory), dtype=torch.float32)


# The engine's hybrid fixtures (scripts/hybrid_fixtures.py) whose Mamba layers are transformers'
# Mamba / Mamba-2 mixers (Jamba's Mamba-1, the others' Mamba-2), every parameter randomised.
HYBRID_FIXTURES = ("bamba", "falcon_h1", "granitemoehybrid-moe", "jamba", "nemotron_h",
                   "zamba2")


def hybrid_fixture(directory):
    """Its MoE experts on transformers' eager loop: the grouped matrix product it picks by
    default has no float64, which the reference runs in."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(MODELS, directory), dtype=torch.float32, experts_implementation="eager")


def falcon_mamba(seed=4):
    """A random FalconMamba (Mamba-1 mixers with normalised B, C, dt; no fixture of its own)
    with every parameter moved off its initial value (scripts/make_model_fixtures.py's
    randomize, as the fixture checkpoints)."""
    torch.manual_seed(seed)
    config = transformers.FalconMambaConfig(vocab_size=304, hidden_size=32, state_size=8,
                                            num_hidden_layers=2, use_bias=True)
    model = transformers.FalconMambaForCausalLM(config).float()
    randomize(model, seed)
    return model


MODEL_MAKERS = {"mamba": lambda: fixture("mamba"), "mamba2": lambda: fixture("mamba2"),
                "falcon_mamba": falcon_mamba,
                **{name: lambda name=name: hybrid_fixture(name) for name in HYBRID_FIXTURES}}


def ids(batch, length, seed):
    return torch.randint(2, 300, (batch, length), generator=torch.Generator().manual_seed(seed))


def ssmkit_ops_run(fn):
    """The names of the ssmkit custom ops that ran inside fn()."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if e.key.startswith("ssmkit::")}


@pytest.mark.parametrize("name", list(MODEL_MAKERS))
def test_accelerated_model_equals_transformers(name):
    """Against the unaccelerated model run in float64 (its f32 run has rounding of its own,
    up to ~1e-4 on the smallest gradients)."""
    ref = MODEL_MAKERS[name]()
    model = st.accelerate(copy.deepcopy(ref))
    ref = ref.double()
    assert type(model) is type(ref)
    assert list(model.state_dict()) == list(ref.state_dict())
    assert all(torch.equal(a.double(), b) for a, b in zip(model.state_dict().values(),
                                                           ref.state_dict().values()))
    x = ids(2, 37, 1)
    model.train()
    ref.train()
    want = ref(x, labels=x)
    ran = ssmkit_ops_run(lambda: model(x, labels=x).loss.backward())
    got = model(x, labels=x)
    assert {"ssmkit::causal_conv1d_fwd", "ssmkit::causal_conv1d_bwd"} <= ran
    assert ran & {"ssmkit::selective_scan_bwd", "ssmkit::ssd_bwd"}
    assert_close(got.logits.detach().numpy(), want.logits.detach().numpy(), 1e-4, "logits")
    model.zero_grad()
    got.loss.backward()
    want.loss.backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is not None:
            assert_close(p.grad.numpy(), q.grad.numpy(), gradient_tolerance(n), f"d{n}")


def gradient_tolerance(name):
    """1e-4, except the per-head sums of the Mamba-2 scan (A_log, dt_bias, D of an SSD layer):
    sums over every position, head dim and state whose cancellation leaves f32 rounding near
    1e-4 of the result (tests/harness/cases/ssd.cpp bounds them by their own rounding noise)."""
    per_head = name.endswith(("A_log", "dt_bias", ".D"))
    return 1e-3 if per_head else 1e-4


@pytest.mark.parametrize("name", list(MODEL_MAKERS))
def test_accelerated_greedy_generate_equals_transformers(name):
    ref = MODEL_MAKERS[name]().eval()
    model = st.accelerate(copy.deepcopy(ref))
    prompt = ids(2, 11, 2)
    kwargs = dict(max_new_tokens=9, do_sample=False, attention_mask=torch.ones_like(prompt),
                  pad_token_id=1, output_logits=True, return_dict_in_generate=True)
    want = ref.generate(prompt, **kwargs)
    got = None

    def run():
        nonlocal got
        got = model.generate(prompt, **kwargs)
    ran = ssmkit_ops_run(run)
    assert ran & {"ssmkit::selective_state_update"} and ran & {"ssmkit::causal_conv1d_update"}
    assert "ssmkit::linear_fwd" in ran  # the decode steps' projections and LM head
    assert torch.equal(got.sequences, want.sequences)
    assert_close(torch.stack(got.logits).numpy(), torch.stack(want.logits).numpy(), 1e-4,
                 "decode logits")


# The models the engine loads (Model::FromTensors): every maker but FalconMamba's, whose
# normalised B / C / dt the engine does not run; its generate() stays transformers' loop.
ENGINE_MODELS = [name for name in MODEL_MAKERS if name != "falcon_mamba"]


@pytest.fixture
def engine_runs(monkeypatch):
    """How many generate() calls the engine ran (ssmkit.torch._engine_generate._greedy)."""
    import ssmkit.torch._engine_generate as engine
    runs = []
    greedy = engine._greedy
    monkeypatch.setattr(engine, "_greedy", lambda *a: runs.append(1) or greedy(*a))
    return runs


@pytest.mark.parametrize("name", list(MODEL_MAKERS))
def test_accelerated_greedy_generate_runs_in_the_engine(name, engine_runs):
    """Plain greedy generate() (the bar's case) runs whole in the engine and gives
    transformers' tokens: a batch of two prompts, each row as the unaccelerated model
    generates it alone; then with an end-of-sequence token one row produces early, after which
    that row continues with the pad token and the search stops at max_new_tokens or when both
    rows have ended; and with a minimum length that keeps the end-of-sequence token out before
    it."""
    ref = MODEL_MAKERS[name]().eval()
    model = st.accelerate(copy.deepcopy(ref))
    prompt = ids(2, 7, 5)
    plain = dict(max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)
    want = torch.cat([ref.generate(row[None], **plain) for row in prompt])
    assert torch.equal(model.generate(prompt, **plain), want)
    eos = int(want[0, 7 + 2])  # row 0's third new token
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=eos)
    assert torch.equal(model.generate(prompt, **kwargs), ref.generate(prompt, **kwargs))
    # Not before the fourth new token: the same token is then not chosen at the third.
    kwargs["min_new_tokens"] = 4
    assert torch.equal(model.generate(prompt, **kwargs), ref.generate(prompt, **kwargs))
    engine = name in ENGINE_MODELS
    assert len(engine_runs) == (3 if engine else 0)


def test_accelerated_generate_strips_left_padding(engine_runs):
    """A left-padded batch (attention_mask zeros first) runs each prompt unpadded in the
    engine: each row's new tokens are the unaccelerated model's on that prompt alone."""
    ref = fixture("mamba2").eval()
    model = st.accelerate(copy.deepcopy(ref))
    short, long = ids(1, 4, 6)[0], ids(1, 9, 7)[0]
    prompt = torch.stack([torch.cat([torch.full((5,), 1), short]), long])
    mask = torch.stack([torch.cat([torch.zeros(5), torch.ones(4)]), torch.ones(9)]).long()
    got = model.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False,
                         pad_token_id=1, eos_token_id=None)
    assert len(engine_runs) == 1
    for row, p in enumerate((short, long)):
        want = ref.generate(p[None], max_new_tokens=6, do_sample=False, pad_token_id=1,
                            eos_token_id=None)
        assert torch.equal(got[row, 9:], want[0, len(p):])
    assert torch.equal(got[:, :9], prompt)


def test_accelerated_generate_leaves_other_searches_to_transformers(engine_runs):
    """Sampling, scores in the output, a streamer, a right-padded mask and parameters the
    engine cannot bind go to transformers' generate() (still on ssmkit's kernels); and the
    engine sees parameters changed in place between calls."""
    ref = fixture("mamba").eval()
    model = st.accelerate(copy.deepcopy(ref))
    prompt = ids(1, 6, 8)
    torch.manual_seed(3)
    sampled = model.generate(prompt, max_new_tokens=5, do_sample=True, top_k=4, pad_token_id=1)
    torch.manual_seed(3)
    assert torch.equal(sampled, ref.generate(prompt, max_new_tokens=5, do_sample=True, top_k=4,
                                             pad_token_id=1))
    out = model.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=1,
                         output_scores=True, return_dict_in_generate=True)
    assert len(out.scores) == 3
    streamed = []

    class Streamer:
        def put(self, value):
            streamed.append(value)

        def end(self):
            pass
    model.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=1, streamer=Streamer())
    assert streamed
    right_padded = torch.ones(1, 6, dtype=torch.long)
    right_padded[0, -1] = 0
    model.generate(prompt, attention_mask=right_padded, max_new_tokens=2, do_sample=False,
                   pad_token_id=1)
    assert not engine_runs
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # tied: the embedding too, in place
        ref.lm_head.weight.mul_(-1.0)
    want = ref.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=1)
    assert torch.equal(model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=1),
                       want)
    assert len(engine_runs) == 1


@pytest.mark.parametrize("packing", ["seq_idx", "cu_seqlens"])
def test_accelerated_mamba2_keeps_packed_sequences_apart(packing):
    """transformers' Mamba-2 base model hands its keyword arguments to the mixers' kernels
    (without mamba_ssm it refuses packed input): accelerated, a packed row (mamba_ssm's
    seq_idx or cu_seqlens; an attention argument such as cu_seq_lens_q is ignored, as its
    mamba_ssm path does) equals each sequence run alone through the unaccelerated model, and
    so do the parameter gradients of a loss summed over the sequences."""
    ref = fixture("mamba2").backbone
    model = st.accelerate(copy.deepcopy(ref))
    lengths = (5, 1, 12, 9)
    x = ids(1, sum(lengths), 9)
    cu = torch.tensor((0,) + lengths).cumsum(0).to(torch.int32)
    packed = {"seq_idx": torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                                 torch.tensor(lengths))[None]} \
        if packing == "seq_idx" else {"cu_seqlens": cu}
    ran = {}

    def run():
        ran["out"] = model(x, **packed, cu_seq_lens_q=cu, use_cache=False).last_hidden_state
        (ran["out"] ** 2).sum().backward()
    assert "ssmkit::ssd_fwd" in ssmkit_ops_run(run)
    ref = ref.double()
    want = torch.cat([ref(piece, use_cache=False).last_hidden_state
                      for piece in torch.split(x, lengths, 1)], 1)
    (want ** 2).sum().backward()
    assert_close(ran["out"].detach().numpy(), want.detach().numpy(), 1e-4, "hidden states")
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad.numpy(), q.grad.numpy(), gradient_tolerance(n), f"d{n}")


def test_accelerated_mamba1_mixer_refuses_packed_sequences():
    """transformers' Mamba mixer hands its keyword arguments (seq_idx) to its convolution but
    nothing to its scan (its model passes none on; a caller of the mixer can): rather than
    restart one and not the other, the accelerated mixer refuses packing."""
    model = st.accelerate(fixture("mamba"))
    mixer = model.backbone.layers[0].mixer
    x = torch.randn(1, 8, model.config.hidden_size)
    with pytest.raises(NotImplementedError, match="seq_idx"):
        mixer(x, seq_idx=torch.zeros(1, 8, dtype=torch.int32))


def test_accelerate_is_per_instance_and_idempotent():
    ref = fixture("mamba")
    model = st.accelerate(st.accelerate(copy.deepcopy(ref)))
    assert not any("forward" in m.__dict__ for m in ref.modules())
    mixer = model.backbone.layers[0].mixer
    assert "forward" in mixer.__dict__
    x = ids(1, 8, 3)
    with torch.no_grad():
        assert ssmkit_ops_run(lambda: model(x)) and not ssmkit_ops_run(lambda: ref(x))


def test_accelerate_refuses_a_model_without_mamba_mixers():
    with pytest.raises(ValueError, match="no Mamba"):
        st.accelerate(torch.nn.Linear(3, 3))
