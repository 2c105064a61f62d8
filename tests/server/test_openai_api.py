"""`ssmkit serve` with the built-in model through the official openai client: completions,
chat, streaming, stop strings, seeds, logprobs, usage, /v1/models, /health, /metrics, the
prefix state cache, parity with `ssmkit generate`, and batching that changes nothing."""

import concurrent.futures
import json
import urllib.request

import openai
import pytest

from conftest import TEMPLATES, generate, Server
from test_chat_templates import transformers_environment

pytestmark = pytest.mark.timeout(300)

PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Blessed are",
           "And it came to pass", "Thus saith the LORD", "Now", "Behold, I"]


def complete(client, prompt, **kw):
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.completions.create(model="default", prompt=prompt, **kw)


def stream_text(client, prompt, **kw):
    """The concatenated text of a streamed completion, its finish reason and its usage."""
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    text, finish, usage = "", None, None
    for chunk in client.completions.create(model="default", prompt=prompt, stream=True, **kw):
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
        usage = getattr(chunk, "usage", None) or usage
    return text, finish, usage


def test_models_and_health(server):
    client = server.client()
    models = client.models.list()
    assert [m.id for m in models.data] == ["default"]
    assert client.models.retrieve("default").id == "default"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok", "slots": 8}


@pytest.mark.parametrize("prompt", PROMPTS[:4])
def test_greedy_completion_equals_generate(server, prompt):
    client = server.client()
    want = generate(prompt, 40)
    r = complete(client, prompt, max_tokens=40)
    assert r.choices[0].text == want
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(prompt.encode())
    assert r.usage.completion_tokens == 40
    assert r.usage.total_tokens == r.usage.prompt_tokens + 40
    text, finish, usage = stream_text(client, prompt, max_tokens=40)
    assert text == want and finish == "length"
    assert usage.completion_tokens == 40


def test_prompt_as_token_ids(server):
    client = server.client()
    prompt = "And God said"
    by_text = complete(client, prompt).choices[0].text
    assert complete(client, list(prompt.encode())).choices[0].text == by_text
    assert complete(client, [prompt]).choices[0].text == by_text


def test_stop_strings(server):
    client = server.client()
    prompt = "And God said"
    full = generate(prompt, 120)
    stop = "LORD"
    assert stop in full, "the model's continuation should name the LORD"
    r = complete(client, prompt, max_tokens=120, stop=[stop, "zzz"])
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    text, finish, _ = stream_text(client, prompt, max_tokens=120, stop=stop)
    assert text == full[:full.index(stop)] and finish == "stop"
    # A stop string that never occurs changes nothing.
    assert complete(client, prompt, max_tokens=30, stop="qqqq").choices[0].text == full[:30]


def test_seed_reproducibility(server):
    client = server.client()
    kw = dict(max_tokens=40, temperature=1.0, top_p=0.95)
    a = complete(client, "Thus saith", seed=1234, **kw).choices[0].text
    b = complete(client, "Thus saith", seed=1234, **kw).choices[0].text
    streamed, _, _ = stream_text(client, "Thus saith", seed=1234, **kw)
    assert a == b == streamed
    others = {complete(client, "Thus saith", seed=s, **kw).choices[0].text for s in range(1, 6)}
    assert len(others | {a}) > 1, "different seeds should give different samples"
    assert complete(client, "Thus saith", max_tokens=40, temperature=0, seed=5).choices[0].text \
        == generate("Thus saith", 40)


def test_logprobs(server):
    client = server.client()
    r = complete(client, "And God said", max_tokens=8, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(8)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 3 and logprob <= 0
        # Greedy: the chosen token is the most likely one.
        assert max(top.values()) == pytest.approx(logprob, abs=1e-6)
        assert top[token] == pytest.approx(logprob, abs=1e-6)
    chat = server.client().chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
        temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 4
    assert all(len(c.top_logprobs) == 2 and c.bytes is not None for c in content)


def chat_prompt(messages):
    """The prompt text transformers' apply_chat_template would render with the test template
    (add_generation_prompt=True; the built-in model has no special tokens)."""
    template = transformers_environment().from_string(
        (TEMPLATES / "granite_like.jinja").read_text())
    return template.render(messages=messages, add_generation_prompt=True)


def test_chat_renders_the_template_and_continues_it(server):
    client = server.client()
    messages = [{"role": "system", "content": "You speak as the prophets."},
                {"role": "user", "content": "What did God say?"},
                {"role": "assistant", "content": "Let there be light."},
                {"role": "user", "content": "And then?"}]
    prompt = chat_prompt(messages)
    r = client.chat.completions.create(model="default", messages=messages, max_tokens=30,
                                       temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.usage.prompt_tokens == len(prompt.encode())
    # The same prompt through /v1/completions gives the same text: the chat path renders
    # exactly what jinja2 renders and tokenizes it without extra tokens.
    want = complete(client, prompt, max_tokens=30).choices[0].text
    assert r.choices[0].message.content == want
    chunks = list(client.chat.completions.create(model="default", messages=messages,
                                                 max_tokens=30, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and not any(finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30


def test_chat_text_parts_and_max_completion_tokens(server):
    client = server.client()
    as_parts = client.chat.completions.create(
        model="default", max_completion_tokens=10, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello "},
                                               {"type": "text", "text": "there"}]}])
    as_text = client.chat.completions.create(
        model="default", max_tokens=10, temperature=0,
        messages=[{"role": "user", "content": "Hello there"}])
    assert as_parts.choices[0].message.content == as_text.choices[0].message.content
    assert as_parts.usage.completion_tokens == 10


def test_concurrent_requests_give_what_each_gives_alone(server):
    client = server.client()
    alone = [complete(client, p, max_tokens=32).choices[0].text for p in PROMPTS]
    # Mixed lengths and start times: prompts join and leave the batch at different steps.
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        futures = [pool.submit(complete, client, p, max_tokens=32) for p in PROMPTS]
        futures += [pool.submit(stream_text, client, p, max_tokens=32) for p in PROMPTS]
        together = [f.result() for f in futures]
    assert [r.choices[0].text for r in together[:len(PROMPTS)]] == alone
    assert [t for t, _, _ in together[len(PROMPTS):]] == alone


def test_prefix_state_cache(start_server):
    cached = start_server("--slots", "2", "--prefill-chunk", "64", "--state-cache-mb", "64")
    uncached = start_server("--slots", "2", "--prefill-chunk", "64", "--state-cache-mb", "0")
    prefix = ("In the beginning God created the heaven and the earth. And the earth was without "
              "form, and void; and darkness was upon the face of the deep. ") * 3
    question = "And God said"
    c, u = cached.client(), uncached.client()
    first = complete(c, prefix, max_tokens=8)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    r = complete(c, prefix + question, max_tokens=24)
    # The whole earlier prompt was cached at its end.
    assert r.usage.prompt_tokens_details.cached_tokens == len(prefix.encode())
    assert r.choices[0].text == complete(u, prefix + question, max_tokens=24).choices[0].text
    # A prompt sharing only part of it restores the last chunk boundary (a multiple of 64).
    partial = prefix[:150] + "Behold"
    r2 = complete(c, partial, max_tokens=16)
    assert r2.usage.prompt_tokens_details.cached_tokens == 128
    assert r2.choices[0].text == complete(u, partial, max_tokens=16).choices[0].text
    # The same prompt again: nothing to prefill, the same greedy text.
    again = complete(c, prefix + question, max_tokens=24)
    assert again.usage.prompt_tokens_details.cached_tokens == len((prefix + question).encode())
    assert again.choices[0].text == r.choices[0].text
    m = cached.metrics()
    assert m["ssmkit_state_cache_hits_total"] >= 3
    assert m["ssmkit_state_cache_reused_tokens_total"] >= len(prefix.encode()) + 128
    assert uncached.metrics()["ssmkit_state_cache_hits_total"] == 0


def test_metrics(server):
    client = server.client()
    complete(client, "Now", max_tokens=5)
    stream_text(client, "Now", max_tokens=5)
    m = server.metrics()
    for name in ["ssmkit_prompt_tokens_total", "ssmkit_generated_tokens_total",
                 "ssmkit_queue_depth", "ssmkit_slots_busy", "ssmkit_slots_total",
                 "ssmkit_time_to_first_token_seconds_count",
                 "ssmkit_inter_token_latency_seconds_count", "ssmkit_state_cache_hits_total"]:
        assert name in m, name
    assert m['ssmkit_requests_total{endpoint="completions",outcome="ok"}'] >= 2
    assert m["ssmkit_slots_total"] == 8
    assert m["ssmkit_time_to_first_token_seconds_count"] >= 2
    assert m['ssmkit_time_to_first_token_seconds_bucket{le="+Inf"}'] == \
        m["ssmkit_time_to_first_token_seconds_count"]
    assert m["ssmkit_generated_tokens_total"] >= 10
