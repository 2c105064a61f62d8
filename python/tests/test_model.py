"""ssmkit.Model, Session, Tokenizer and generation against what transformers recorded for the
tiny checkpoints of scripts/make_model_fixtures.py (tests/fixtures/models: every prefill
position, teacher-forced decode steps, greedy continuations), the built-in model, and bad
inputs raising with the engine's messages.

Dimension legend: B batch, L prompt length, V vocab (304 in the fixtures), S decode steps."""
import json
import os
import struct
import threading

import numpy as np
import pytest

import ssmkit
from checks import assert_close

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures")
MODELS = os.path.join(FIXTURES, "models")
TOLERANCE = 1e-4  # the engine's parity bar (tests/model_parity_test.cpp)
V = 304
PROMPTS = ("p0", "p1", "p2", "p3")
# The prompts' text (scripts/make_model_fixtures.py PROMPTS), whose ids the files record.
PROMPT_TEXT = ("The", "It doesn't look back",
               "A quick brown fox jumps over the lazy dog. Numbers: 12 345",
               "Café, naïve, 日本語")

# (checkpoint directory, the directory whose expected.safetensors applies, arch, has tokenizer)
FIXTURE_MODELS = [
    ("mamba1-hf", "mamba1-hf", "mamba1", True),
    ("mamba1-hf-bf16", "mamba1-hf-bf16", "mamba1", True),
    ("mamba1-ss", "mamba1-hf", "mamba1", False),
    ("mamba2-hf", "mamba2-hf", "mamba2", True),
    ("mamba2-ss", "mamba2-hf", "mamba2", False),
]
FIXTURE_IDS = [f[0] for f in FIXTURE_MODELS]


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (F32 and I32 tensors)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "I32": np.int32}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end],
                                  dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def expected(name):
    """Per prompt: ids (L), prefill (L, V), greedy (S), decode (S, V) (the logits before each
    greedy token)."""
    st = read_safetensors(os.path.join(MODELS, name, "expected.safetensors"))
    return [dict(ids=st[f"{p}.ids"], prefill=st[f"{p}.prefill_logits"],
                 greedy=st[f"{p}.greedy_ids"], decode=st[f"{p}.decode_logits"])
            for p in PROMPTS]


@pytest.fixture(scope="module", params=FIXTURE_MODELS, ids=FIXTURE_IDS)
def fixture(request):
    model_dir, expected_dir, arch, has_tokenizer = request.param
    return dict(model=ssmkit.Model.load(os.path.join(MODELS, model_dir)), name=model_dir,
                arch=arch, has_tokenizer=has_tokenizer, expected=expected(expected_dir))


def test_config(fixture):
    c = fixture["model"].config
    assert (c["arch"], c["vocab_size"], c["n_layer"], c["d_model"], c["d_inner"]) == (
        fixture["arch"], V, 2, 32, 64)
    if fixture["arch"] == "mamba2":
        assert (c["nheads"], c["headdim"], c["ngroups"], c["d_state"]) == (8, 8, 2, 16)
    else:
        assert (c["dt_rank"], c["d_state"]) == (2, 8)
    # The HF configs name token 0 as bos and eos, the state-spaces ones none.
    want_eos = 0 if fixture["name"].endswith(("-hf", "-bf16")) else None
    assert c["eos_token_id"] == want_eos and c["bos_token_id"] == want_eos
    assert fixture["model"].parameter_count > 0


def test_prefill_and_decode_logits(fixture):
    """Each prompt alone: every position's logits, then teacher-forced decode steps whose
    argmax is transformers' greedy continuation."""
    session = fixture["model"].session()
    for p, e in zip(PROMPTS, fixture["expected"]):
        every = session.prefill(e["ids"], all_logits=True)
        assert every.shape == (1, len(e["ids"]), V) and every.dtype == np.float32
        assert_close(every[0], e["prefill"], TOLERANCE, f"{fixture['name']} {p} prefill")
        logits = session.prefill(list(e["ids"]))  # a list of ints, last position only
        assert logits.shape == (1, V)
        assert_close(logits[0], e["prefill"][-1], TOLERANCE, f"{p} last position")
        for j, token in enumerate(e["greedy"]):
            assert_close(logits[0], e["decode"][j], TOLERANCE, f"{p} decode step {j}")
            assert int(np.argmax(logits[0])) == token, f"{p} greedy token {j}"
            logits = session.decode(int(token))


def test_batch_of_different_lengths(fixture):
    """The four prompts (2 to 46 tokens) as one batch, then decode steps for all at once."""
    e = fixture["expected"]
    session = fixture["model"].session(batch=len(e))
    prompts = [x["ids"] for x in e]
    every = session.prefill(prompts, all_logits=True)
    L = max(len(p) for p in prompts)
    assert every.shape == (len(e), L, V) and session.batch == len(e)
    for b, x in enumerate(e):
        n = len(x["ids"])
        assert_close(every[b, :n], x["prefill"], TOLERANCE, f"prompt {b} in a batch")
        assert np.isnan(every[b, n:]).all(), "rows past a prompt's end"
    out = np.full((len(e), V), np.nan, np.float32)
    for j in range(len(e[0]["greedy"]) - 1):
        got = session.decode(np.array([x["greedy"][j] for x in e]), out=out)
        assert got is out
        for b, x in enumerate(e):
            assert_close(out[b], x["decode"][j + 1], TOLERANCE, f"prompt {b} decode step {j + 1}")


def test_model_logits(fixture):
    x = fixture["expected"][1]
    got = fixture["model"].logits([x["ids"], x["ids"][:3]])
    assert_close(got[0], x["prefill"], TOLERANCE, "Model.logits")
    assert_close(got[1, :3], x["prefill"][:3], TOLERANCE, "Model.logits, a shorter prompt")


def test_greedy_generation(fixture):
    model = fixture["model"]
    for p, e in zip(PROMPTS, fixture["expected"]):
        S = len(e["greedy"])
        g = model.generate(list(e["ids"]), max_new_tokens=S)
        assert g.ids == list(e["greedy"]), p
        assert g.prompt_ids == list(e["ids"]) and g.finish_reason == "length"
        assert g.prefill_seconds >= 0 and g.decode_seconds >= 0
        assert (g.text is not None) == fixture["has_tokenizer"]
        streamed = list(model.stream(e["ids"], S))
        assert [t.id for t in streamed] == list(e["greedy"])
        seen = []
        g = model.generate(e["ids"], S, callback=lambda t, text: seen.append(t) or len(seen) == 3)
        assert seen == g.ids == list(e["greedy"][:3]) and g.finish_reason == "stopped"


def test_generation_from_text(fixture):
    if not fixture["has_tokenizer"]:
        with pytest.raises(ssmkit.InvalidArgumentError, match="no tokenizer.json"):
            fixture["model"].generate("The", 4)
        with pytest.raises(ssmkit.InvalidArgumentError, match="stop strings need a tokenizer"):
            fixture["model"].generate([5, 6], 4, stop="x")
        return
    model = fixture["model"]
    for text, e in zip(PROMPT_TEXT, fixture["expected"]):
        assert model.tokenizer.encode(text) == list(e["ids"])
        g = model.generate(text, len(e["greedy"]))
        assert g.ids == list(e["greedy"])
        assert g.text == model.tokenizer.decode(e["greedy"], skip_special=True)
        pieces = [t.text for t in model.stream(text, len(e["greedy"]))]
        assert "".join(pieces) == g.text
        if len(g.text) >= 4:
            # A stop string from inside the continuation: the text ends before its first match.
            stop = g.text[1:3]
            k = g.text.find(stop)
            cut = model.generate(text, len(e["greedy"]), stop=["\x00never", stop])
            assert cut.text == g.text[:k] and cut.finish_reason == "stop"
            assert cut.ids == g.ids[:len(cut.ids)]


def test_session_keeps_model_alive():
    e = expected("mamba1-hf")[0]
    session = ssmkit.Model.load(os.path.join(MODELS, "mamba1-hf")).session()
    assert_close(session.prefill(e["ids"])[0], e["prefill"][-1], TOLERANCE, "model freed")


def test_session_device():
    """device="cpu" is the default; an unknown device is refused; "cuda" without a GPU (or a
    build without the CUDA backend) is Unsupported (the GPU itself: tests/gpu/engine_gpu_test)."""
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    assert model.session().device == "cpu"
    with pytest.raises(ssmkit.InvalidArgumentError, match="device"):
        model.session(device="tpu")
    try:
        session = model.session(device="cuda")
    except ssmkit.UnsupportedError as e:
        assert "device cuda" in str(e)
    else:
        e = expected("mamba2-hf")[0]
        last = session.prefill(e["ids"])[0]
        assert np.abs(last - e["prefill"][-1]).max() <= 3e-2 * max(1.0, np.abs(last).max())


def test_concurrent_use_of_one_session():
    """Calls on one session from two threads (GIL released while computing) are serialised:
    each prefill gives its own prompt's logits."""
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    e = expected("mamba2-hf")
    session = model.session()
    errors = []

    def work(x):
        for _ in range(10):
            err = np.linalg.norm(session.prefill(x["ids"], all_logits=True)[0] - x["prefill"])
            if not err <= TOLERANCE * np.linalg.norm(x["prefill"]):
                errors.append(err)

    threads = [threading.Thread(target=work, args=(x,)) for x in (e[1], e[2])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_builtin_model():
    directory = ssmkit.default_model_dir()
    assert directory.endswith(os.path.join("models", "default"))
    model = ssmkit.Model.load()
    c = model.config
    assert (c["arch"], c["vocab_size"], c["d_model"], c["n_layer"]) == ("mamba2", 256, 256, 6)
    assert model.tokenizer.name == "bytes" and model.path == directory
    sample = dict(temperature=0.8, top_k=40, top_p=0.95)
    runs = [model.generate("And God said", 64, seed=s, **sample) for s in (1, 1, 2)]
    assert len(runs[0].ids) == 64 and runs[0].finish_reason == "length"
    assert runs[0].text == runs[1].text, "same seed, different text"
    assert runs[0].text != runs[2].text, "seeds 1 and 2 gave the same text"
    assert all(ch == "\n" or " " <= ch <= "~" for ch in runs[0].text), runs[0].text
    print(f"built-in model, seed 1: And God said{runs[0].text}")


def test_stop_string_across_tokens():
    """The built-in model's tokens are bytes: a stop string spans several tokens, and the
    streamed text holds back what may start one."""
    model = ssmkit.Model.load()
    full = model.generate("And God said", 48).text
    stop = full[20:24]
    k = full.find(stop)
    stream = model.stream("And God said", 48, stop=stop)
    pieces = [t.text for t in stream]
    assert "".join(pieces) == full[:k] == stream.generation.text
    assert stream.generation.finish_reason == "stop" and len(pieces) == k + 4


def test_tokenizers():
    tok = ssmkit.Tokenizer.from_file(os.path.join(FIXTURES, "tokenizer", "tokenizer.json"))
    for text in PROMPT_TEXT + ("", "  spaces\tand\nnewlines  ", "<|endoftext|>x"):
        assert tok.decode(tok.encode(text)) == text
    ids = tok.encode("<|endoftext|>x")
    assert ids[0] == 0 == tok.token_id("<|endoftext|>") and tok.decode(ids, skip_special=True) == "x"
    assert tok.token_id("no such token") is None
    b = ssmkit.Tokenizer.bytes()
    assert b.encode("Aé") == [65, 0xC3, 0xA9] and b.vocab_size == 256
    assert b.decode([0xC3]) == "\ufffd"  # half of é
    assert b.decode(np.array([65, 0xC3, 0xA9], np.int64)) == "Aé"


def test_tokenizer_random_round_trip(rng):
    tok = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf")).tokenizer
    alphabet = list("abcdefgh XYZ.,!?0123\n") + ["é", "日", "語", "🙂"]
    for _ in range(20):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 40))))
        assert tok.decode(tok.encode(text)) == text


# ------------------------------------------------------------------ bad inputs


def test_load_errors():
    with pytest.raises(ssmkit.InvalidArgumentError, match="no-such-model"):
        ssmkit.Model.load(os.path.join(MODELS, "no-such-model"))
    with pytest.raises(ssmkit.InvalidArgumentError, match="config.json"):
        ssmkit.Model.load(os.path.join(FIXTURES, "tokenizer"))
    with pytest.raises(ssmkit.InvalidArgumentError, match="no-such-tokenizer.json"):
        ssmkit.Tokenizer.from_file(os.path.join(MODELS, "no-such-tokenizer.json"))
    with pytest.raises(ssmkit.InvalidArgumentError, match="no tokenizer.json"):
        ssmkit.Model.load(os.path.join(MODELS, "mamba1-ss")).tokenizer
    with pytest.raises(TypeError, match="Model.load"):
        ssmkit.Model("path")
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba1-ss"))
    with pytest.raises(ssmkit.InvalidArgumentError, match="max_batch: expected >= 1, given 0"):
        model.session(0)


@pytest.fixture(scope="module")
def session():
    return ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf")).session(batch=2)


@pytest.mark.parametrize("ids, error, message", [
    (np.array([1.0, 2.0]), TypeError, "expected integer token ids, given dtype float64"),
    ([[1, 2], [3.5]], TypeError, r"ids\[1\]: expected integer token ids"),
    ([True, False], TypeError, "given dtype bool"),
    ("hello", TypeError, "given str"),
    (np.zeros((1, 2, 3), np.int32), ssmkit.InvalidArgumentError,
     r"expected \(L\) or \(B, L\) token ids, given shape \(1, 2, 3\)"),
    ([5, V], ssmkit.InvalidArgumentError,
     r"prompt 0: token 304 at position 1 outside the vocabulary \[0, 304\)"),
    ([[5], [6, -1]], ssmkit.InvalidArgumentError,
     r"prompt 1: token -1 at position 1 outside the vocabulary"),
    (np.array([5, 2**40]), ssmkit.InvalidArgumentError, "token 1099511627776 outside the vocabulary"),
    ([[5], [6], [7]], ssmkit.InvalidArgumentError,
     r"expected 1 to 2 prompts \(the session's max_batch\), given 3"),
    ([[5], []], ssmkit.InvalidArgumentError, "prompt 1 is empty"),
    ([], ssmkit.InvalidArgumentError, "expected at least one prompt"),
], ids=["float", "ragged-float", "bool", "str", "rank3", "vocab", "negative", "int64-overflow",
        "batch", "empty-prompt", "no-prompt"])
def test_prefill_errors(session, ids, error, message):
    with pytest.raises(error, match=message):
        session.prefill(ids)


def test_decode_errors():
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    session = model.session(batch=2)
    with pytest.raises(ssmkit.InvalidArgumentError, match="call Prefill first"):
        session.decode(5)
    session.prefill([[5, 6, 7, 8], [9, 10]])
    want = session.decode([11, 12])
    session.prefill([[5, 6, 7, 8], [9, 10]])
    out = np.full((2, V), np.nan, np.float32)
    with pytest.raises(ssmkit.InvalidArgumentError,
                       match=r"expected one per sequence \(2\), given 3"):
        session.decode([11, 12, 13])
    with pytest.raises(ssmkit.InvalidArgumentError, match="token -1 at position 1 outside"):
        session.decode([11, -1], out=out)
    with pytest.raises(ssmkit.InvalidArgumentError,
                       match=r"decode: logits: expected \(B, V\) = \(2, 304\), given \(1, 304\)"):
        session.decode([11, 12], out=np.zeros((1, V), np.float32))
    with pytest.raises(TypeError, match="float32"):
        session.decode([11, 12], out=np.zeros((2, V), np.float64))
    with pytest.raises(TypeError, match="expected integer token ids"):
        session.decode([11.0, 12.0])
    with pytest.raises(ssmkit.InvalidArgumentError, match=r"expected a sequence .* shape \(2, 1\)"):
        session.decode([[11], [12]])
    assert np.isnan(out).all(), "a failed decode wrote logits"
    session.decode([11, 12], out=out)  # the failures left the state usable
    np.testing.assert_array_equal(out, want)
    session.reset()
    assert session.batch == 0
    with pytest.raises(ssmkit.InvalidArgumentError, match="call Prefill first"):
        session.decode([11, 12])


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(max_new_tokens=-1), ssmkit.InvalidArgumentError, "max_tokens: expected >= 0, given -1"),
    (dict(temperature=-1.0), ssmkit.InvalidArgumentError, "temperature"),
    (dict(temperature=1.0, top_p=0.0), ssmkit.InvalidArgumentError, "top_p"),
    (dict(top_k=-2), ssmkit.InvalidArgumentError, "top_k"),
    (dict(seed=-1), ssmkit.InvalidArgumentError, "seed: expected 0 <= seed < 2\\*\\*64"),
    (dict(max_new_tokens=2.5), TypeError, "integer"),
    (dict(prompt=[5, 400]), ssmkit.InvalidArgumentError, "token 400 at position 1 outside"),
    (dict(prompt=[[5]]), ssmkit.InvalidArgumentError, r"prompt: expected a sequence"),
    (dict(stop=[""]), ssmkit.InvalidArgumentError, "stop: expected non-empty strings"),
], ids=["max-tokens", "temperature", "top-p", "top-k", "seed", "float-count", "vocab",
        "batch-prompt", "empty-stop"])
def test_generate_errors(kwargs, error, message):
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    kwargs = {"prompt": "The", **kwargs}
    with pytest.raises(error, match=message):
        model.generate(**kwargs)


def test_generation_refuses_a_session_moved_on():
    """A generation notices that its session was prefilled by another call since it started
    (the Python classes give each generation its own session; this is the binding's guard)."""
    from ssmkit import _ssmkit
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    session = _ssmkit._Session(model._handle, 1)
    generator = _ssmkit._Generator(session, np.array([5, 6], np.int32), 4, 0.0, 0, 1.0, 0, -1,
                                   None, True)
    assert generator.next()[0] >= 0
    session.prefill(np.array([[7]], np.int32), np.array([1]), np.empty((1, V), np.float32), None)
    with pytest.raises(ssmkit.InvalidArgumentError, match="start a new generation"):
        generator.next()


def test_bf16_products_in_prefill():
    """The opt-in bf16 products: a bf16 model's prefill of more than 64 tokens (the many-row
    products) moves by about x's rounding to bf16; off again, the bits of before. Where the CPU
    has no AVX-512 BF16 the setting stays off."""
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba1-hf-bf16"))
    ids = list(np.random.default_rng(0).integers(0, V, 150))
    session = model.session()
    before = session.prefill(ids, all_logits=True)
    step_before = session.decode(3)
    assert ssmkit.bf16_products() is False
    on = ssmkit.set_bf16_products(True)
    try:
        assert ssmkit.bf16_products() is on
        if not on:
            pytest.skip("this CPU has no AVX-512 BF16")
        during = session.prefill(ids, all_logits=True)
        moved = np.linalg.norm(during - before) / np.linalg.norm(before)
        assert 1e-5 < moved < 2e-2, moved
    finally:
        assert ssmkit.set_bf16_products(False) is False
    np.testing.assert_array_equal(session.prefill(ids, all_logits=True), before)
    np.testing.assert_array_equal(session.decode(3), step_before)
