"""ssmkit.Model on the hybrid families' fixtures (scripts/hybrid_fixtures.py), loaded as the
Mamba ones are: the config's block list, logits at every prefill position and over
teacher-forced decode steps against transformers', a batch of prompts of different lengths, and
greedy generation from text through each family's tokenizer (byte-level with a Split
pre-tokenizer; SentencePiece-style with byte fallback)."""
import os

import numpy as np
import pytest

import ssmkit
from checks import assert_close
from test_model import MODELS, PROMPT_TEXT, PROMPTS, TOLERANCE, expected

# (directory, family, block list, vocab)
HYBRIDS = [
    ("granitemoehybrid-moe", "granitemoehybrid", ["mamba2", "moe", "attention", "moe"] * 2, 304),
    ("bamba", "bamba", ["mamba2", "mlp", "attention", "mlp", "mamba2", "mlp"], 304),
    ("nemotron_h-moe", "nemotron_h", ["mamba2", "moe", "attention", "moe", "mlp", "mamba2"], 304),
    ("nemotron_h-moe-latent", "nemotron_h",
     ["mamba2", "moe", "mamba2", "attention", "moe", "mlp"], 304),
    ("falcon_h1-norm", "falcon_h1", ["attention+mamba2", "mlp"] * 2, 304),
    ("jamba", "jamba", ["mamba1", "moe", "attention", "mlp"] * 2, 392),
    ("zamba2", "zamba2", ["mamba2", "shared-transformer", "mamba2", "mamba2",
                          "shared-transformer", "mamba2", "shared-transformer", "mamba2"], 392),
]


@pytest.fixture(scope="module", params=HYBRIDS, ids=[h[0] for h in HYBRIDS])
def hybrid(request):
    name, family, blocks, vocab = request.param
    return dict(model=ssmkit.Model.load(os.path.join(MODELS, name)), name=name, family=family,
                blocks=blocks, vocab=vocab, expected=expected(name))


def test_config(hybrid):
    c = hybrid["model"].config
    assert (c["family"], c["blocks"], c["vocab_size"]) == (
        hybrid["family"], hybrid["blocks"], hybrid["vocab"])
    assert c["architecture"].endswith("ForCausalLM")


def test_prefill_and_decode_logits(hybrid):
    session = hybrid["model"].session()
    for p, e in zip(PROMPTS, hybrid["expected"]):
        every = session.prefill(e["ids"], all_logits=True)
        assert_close(every[0], e["prefill"], TOLERANCE, f"{hybrid['name']} {p} prefill")
        logits = session.prefill(list(e["ids"]))
        for j, token in enumerate(e["greedy"]):
            assert_close(logits[0], e["decode"][j], TOLERANCE, f"{p} decode step {j}")
            logits = session.decode(int(token))


def test_batch_of_different_lengths(hybrid):
    e = hybrid["expected"]
    session = hybrid["model"].session(batch=len(e))
    every = session.prefill([x["ids"] for x in e], all_logits=True)
    for b, x in enumerate(e):
        assert_close(every[b, :len(x["ids"])], x["prefill"], TOLERANCE, f"prompt {b} in a batch")
    out = np.full((len(e), hybrid["vocab"]), np.nan, np.float32)
    for j in range(len(e[0]["greedy"]) - 1):
        session.decode(np.array([x["greedy"][j] for x in e]), out=out)
        for b, x in enumerate(e):
            assert_close(out[b], x["decode"][j + 1], TOLERANCE, f"prompt {b} step {j + 1}")


def test_generation_from_text(hybrid):
    model = hybrid["model"]
    for text, e in zip(PROMPT_TEXT, hybrid["expected"]):
        assert model.tokenizer.encode(text) == list(e["ids"])
        g = model.generate(text, len(e["greedy"]))
        assert g.ids == list(e["greedy"])
        assert g.text == model.tokenizer.decode(e["greedy"], skip_special=True)
