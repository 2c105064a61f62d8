"""The chat-template renderer (src/server/jinja) against jinja2 set up as transformers'
apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
controls, its tojson, raise_exception, strftime_now and namespace): every template of
templates/ on many random message lists, with and without the generation prompt, must give
the same text, or fail with the same raise_exception message."""

import json
import os
import random
import subprocess
from datetime import datetime

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import BIN, TEMPLATES

SEED = int(os.environ.get("SSMKIT_TEST_SEED", random.randrange(1 << 30)))
CASES_PER_TEMPLATE = 300


class TemplateError(Exception):
    pass


def transformers_environment():
    """jinja2 configured as transformers (utils/chat_template_utils.py) configures it."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WORDS = ["The", "LORD", "said", "unto", "Moses", "and", "light", "é", "naïve", "straße", "中文",
         "🙂", "'single'", '"double"', "back\\slash", "tab\there", "/think", "/no_think",
         "</think>", "{{ not a tag }}", "{% neither %}", "a\u00a0b", "x\u2028y", "100%", "-",
         "...", "?", "\r\n"]


def random_text(rng):
    n = rng.choice([0, 1, 2, 5, 12])
    words = [rng.choice(WORDS) for _ in range(n)]
    text = " ".join(words)
    if rng.random() < 0.3:
        text = rng.choice(["  ", "\n", " \t", ""]) + text + rng.choice(["  ", "\n\n", " ", ""])
    if rng.random() < 0.1:
        text = text + "\n" + random_text(rng)
    return text


def random_messages(rng):
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": random_text(rng)})
    n = rng.choice([1, 1, 2, 3, 4, 6])
    alternate = rng.random() < 0.75
    for i in range(n):
        if alternate:
            role = "user" if i % 2 == 0 else "assistant"
        else:
            role = rng.choice(["user", "assistant", "system", "tool"])
        m = {"role": role, "content": random_text(rng)}
        if role == "assistant" and rng.random() < 0.2:
            m["tool_calls"] = [{"function": {"name": rng.choice(["f", "get_weather"]),
                                             "arguments": rng.choice(
                                                 [{"city": "Paris", "n": 3}, '{"raw": 1}'])}}]
        messages.append(m)
    return messages


def random_case(rng):
    case = {"messages": random_messages(rng), "add_generation_prompt": rng.random() < 0.5,
            "bos_token": rng.choice(["<s>", "<|begin_of_text|>"]), "eos_token": "</s>"}
    return case


def reference(template, case):
    context = dict(case)
    try:
        return {"text": template.render(**context)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def ours(template_path, cases):
    out = subprocess.run([BIN, "chat-template", "--template", str(template_path)],
                         input=json.dumps(cases), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(p.name for p in TEMPLATES.glob("*.jinja")))
def test_template_matches_jinja2(name):
    path = TEMPLATES / name
    template = transformers_environment().from_string(path.read_text())
    rng = random.Random(f"{SEED}-{name}")
    cases = [random_case(rng) for _ in range(CASES_PER_TEMPLATE)]
    got = ours(path, cases)
    assert len(got) == len(cases)
    rendered = errors = 0
    for case, result in zip(cases, got):
        want = reference(template, case)
        context = f"seed {SEED} (SSMKIT_TEST_SEED), case {json.dumps(case)}"
        if "error" in want:
            errors += 1
            # A template's own raise_exception message is passed on word for word; jinja2's
            # other errors (an undefined attribute, ...) only need to be errors too.
            assert "error" in result, f"{context}: jinja2 failed ({want['error']}), we gave " \
                                      f"{result!r}"
            if "must alternate" in want["error"] or "Unknown role" in want["error"]:
                assert result["error"].endswith(want["error"]), context
        else:
            rendered += 1
            assert result == want, f"{context}\nwant {want['text']!r}\ngot  {result!r}"
    assert rendered > CASES_PER_TEMPLATE // 4, f"only {rendered} cases rendered"


def test_raise_exception_message_reaches_the_caller():
    path = TEMPLATES / "jamba_like.jinja"
    case = {"messages": [{"role": "assistant", "content": "first"}],
            "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    (result,) = ours(path, [case])
    assert result == {"error": "Conversation roles must alternate "
                               "user/assistant/user/assistant/..."}


def test_syntax_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("ok\n{% for m in messages %}\n{{ m.role }\n{% endfor %}")
    (result,) = ours(bad, [{"messages": []}])
    assert "line 3" in result["error"], result
