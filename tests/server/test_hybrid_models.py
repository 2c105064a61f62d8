"""`ssmkit serve` with the hybrid checkpoints (attention, MLP and MoE layers beside the Mamba
ones: each slot holds KV rows as well as SSM and conv states) through the official openai
client: greedy parity with `ssmkit generate`, streamed and whole responses alike, concurrent
requests giving what each gives alone (sequences of different lengths joining and leaving the
batch), and the prefix state cache restoring a prefix's KV rows with its states. The tiny
random checkpoints are those of the transformers parity tests (tests/fixtures/models,
scripts/hybrid_fixtures.py)."""

import concurrent.futures

import pytest

from conftest import ROOT, generate
from test_openai_api import complete, stream_text

pytestmark = pytest.mark.timeout(300)

MODELS = ["granitemoehybrid-dense", "granitemoehybrid-moe", "bamba", "nemotron_h", "falcon_h1",
          "jamba", "zamba2"]
PROMPTS = ["The quick brown fox", "Hello", "Once upon a time, in a land far away",
           "1 2 3 4 5 6 7 8 9 10 11 12", "ab", "A hybrid model mixes attention and Mamba"]


def model_dir(name):
    return str(ROOT / "tests" / "fixtures" / "models" / name)


def assert_same_continuation(a, b):
    """Two completions' first choices: the same greedy text, and token log-probabilities within
    a few f32 units in the last place of each other (|log p| < ~6 here, an ulp ~5e-7). Two runs
    of a prompt need not agree to the bit: a restored prefix and the rest prefill in other chunks
    than the whole prompt, and a batch of 2 or more rows takes the products' tiles, not the
    1-row kernel (1 ulp apart on these checkpoints). Restored keys or values zeroed moved them by
    5e-6 to 0.25, these checkpoints' attention layers weighing little beside their Mamba layers
    (a mutation test, 2026-12-03)."""
    assert a.text == b.text
    la, lb = a.logprobs.token_logprobs, b.logprobs.token_logprobs
    assert len(la) == len(lb) > 0
    assert max(abs(x - y) for x, y in zip(la, lb)) < 3e-6, (la, lb)


@pytest.mark.parametrize("name", MODELS)
def test_hybrid_batching_and_parity(start_server, name):
    s = start_server("--model", model_dir(name), "--model-id", "default", "--slots", "4",
                     "--state-cache-mb", "0")
    client = s.client()
    alone = [complete(client, p, max_tokens=16, logprobs=1).choices[0] for p in PROMPTS]
    # Greedy parity with the engine's own generate on the same checkpoint.
    for p, choice in zip(PROMPTS[:2], alone):
        assert choice.text == generate(p, 16, "--model", model_dir(name))
    # More requests than slots, of mixed prompt lengths, some streamed: sequences join and
    # leave the batch (and their KV rows the cache) at different steps.
    with concurrent.futures.ThreadPoolExecutor(2 * len(PROMPTS)) as pool:
        whole = [pool.submit(complete, client, p, max_tokens=16, logprobs=1) for p in PROMPTS]
        streamed = [pool.submit(stream_text, client, p, max_tokens=16) for p in PROMPTS]
        for f, choice in zip(whole, alone):
            assert_same_continuation(f.result().choices[0], choice)
        assert [f.result()[0] for f in streamed] == [c.text for c in alone]


@pytest.mark.parametrize("name", ["granitemoehybrid-dense", "jamba", "zamba2"])
def test_hybrid_prefix_state_cache(start_server, name):
    args = ("--model", model_dir(name), "--model-id", "default", "--slots", "2",
            "--prefill-chunk", "16")
    cached = start_server(*args, "--state-cache-mb", "64")
    uncached = start_server(*args, "--state-cache-mb", "0")
    c, u = cached.client(), uncached.client()
    # Token ids, not text: a text's tokens at the seam of prefix and question may differ from
    # the prefix's own (BPE merges across it), and the cache matches tokens.
    prefix = [10 + (7 * i) % 240 for i in range(100)]
    question = [20 + (5 * i) % 200 for i in range(11)]
    first = complete(c, prefix, max_tokens=4)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    r = complete(c, prefix + question, max_tokens=16, logprobs=1)
    # The earlier prompt was cached at its end (its KV rows with it): only the rest is
    # prefilled, and the continuation is what a server without the cache gives.
    assert r.usage.prompt_tokens_details.cached_tokens == len(prefix)
    assert_same_continuation(
        r.choices[0], complete(u, prefix + question, max_tokens=16, logprobs=1).choices[0])
    # A prompt sharing its first 40 tokens restores the last chunk boundary within them.
    partial = prefix[:40] + question
    r2 = complete(c, partial, max_tokens=12, logprobs=1)
    assert r2.usage.prompt_tokens_details.cached_tokens == 32
    assert_same_continuation(
        r2.choices[0], complete(u, partial, max_tokens=12, logprobs=1).choices[0])
    # The same prompt again: nothing left to prefill, the same continuation.
    again = complete(c, prefix + question, max_tokens=16, logprobs=1)
    assert again.usage.prompt_tokens_details.cached_tokens == len(prefix + question)
    assert_same_continuation(again.choices[0], r.choices[0])
    assert cached.metrics()["ssmkit_state_cache_hits_total"] >= 3
