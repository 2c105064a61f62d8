"""Model.perplexity (llama-perplexity's scoring: chunks of `context` tokens from a fresh state,
the second half of each scored) against transformers on the same checkpoints: the mean negative
log-likelihood of the same positions, from transformers' logits of each chunk in float64."""
import math
import os

import numpy as np
import pytest

import ssmkit
from test_model import MODELS

TEXT = os.path.join(MODELS, "..", "train", "mamba1", "data.txt")
CONTEXT = 96
CHUNKS = 6


def transformers_nll(model_dir, ids):
    """Per scored token, -log p(ids[j + 1] | chunk[:j + 1]) for j in CONTEXT // 2 .. CONTEXT - 2
    of each chunk, from transformers' logits in float64."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    first = CONTEXT // 2
    out = []
    with torch.no_grad():
        for c in range(CHUNKS):
            chunk = torch.tensor([ids[c * CONTEXT:(c + 1) * CONTEXT]])
            logits = model(chunk).logits[0].double()
            logp = torch.log_softmax(logits[first:CONTEXT - 1], dim=-1)
            out.append(-logp.gather(1, chunk[0, first + 1:, None]).squeeze(1))
    return torch.cat(out).numpy()


@pytest.mark.parametrize("name", ["mamba1-hf", "mamba2-hf", "granitemoehybrid-moe", "zamba2"])
def test_matches_transformers(name):
    model = ssmkit.Model.load(os.path.join(MODELS, name))
    with open(TEXT, encoding="utf-8") as f:
        ids = model.tokenizer.encode(f.read())
    assert len(ids) >= CHUNKS * CONTEXT
    want = transformers_nll(os.path.join(MODELS, name), ids)
    for batch in (1, 4):
        got = model.perplexity(ids, CONTEXT, max_chunks=CHUNKS, batch=batch)
        assert got["chunks"] == CHUNKS and got["scored_tokens"] == len(want)
        assert abs(got["mean_nll"] - want.mean()) <= 1e-5 * want.mean(), (got, want.mean())
        stderr = want.std(ddof=1) / math.sqrt(len(want))
        assert abs(got["nll_stderr"] - stderr) <= 1e-3 * stderr
        assert math.isclose(got["perplexity"], math.exp(got["mean_nll"]), rel_tol=1e-12)


def test_text_is_encoded_with_the_models_tokenizer():
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    text = open(TEXT, encoding="utf-8").read()[:4000]
    by_text = model.perplexity(text, 64)
    by_ids = model.perplexity(model.tokenizer.encode(text), 64)
    assert by_text == by_ids and by_text["chunks"] >= 1


def test_bad_arguments_name_themselves():
    model = ssmkit.Model.load(os.path.join(MODELS, "mamba2-hf"))
    with pytest.raises(ssmkit.InvalidArgumentError, match="context: expected >= 3, given 2"):
        model.perplexity([1, 2, 3, 4], 2)
    with pytest.raises(ssmkit.InvalidArgumentError, match="at least one chunk of context 8"):
        model.perplexity([1, 2, 3, 4], 8)
    with pytest.raises(ssmkit.InvalidArgumentError, match=r"tokens\[1\]: expected an id in"):
        model.perplexity([1, 10 ** 6, 3, 4], 4)
    with pytest.raises(ssmkit.InvalidArgumentError, match="batch: expected >= 1, given 0"):
        model.perplexity([1, 2, 3, 4], 4, batch=0)
