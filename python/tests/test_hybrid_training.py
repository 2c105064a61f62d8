"""`ssmkit train --arch hybrid` end to end against transformers: a tiny hybrid (Mamba-2 and
attention layers, each followed by a SwiGLU MLP) trained for a few dozen steps by the CLI, and
one continued (--init) from a GraniteMoeHybrid checkpoint transformers saved (the
granitemoehybrid-dense fixture: no position embedding, one key-value head, a tied head and
embedding 8, residual 0.3, attention 0.2, logits-scaling 1.5 multipliers); each checkpoint loaded by transformers as GraniteMoeHybridForCausalLM (CPU, f32) with no
missing or unexpected tensor; transformers' logits at every position equal our engine's
(ssmkit.Model) within the engine's parity bar, and transformers' validation loss over the
trainer's own validation windows equals the one the trainer logged (its forward on the same
weights). Needs the release build's CLI (build/release/ssmkit, or $SSMKIT_CLI), torch and
transformers.

Dimension legend: L window length, V vocab (256 bytes)."""
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import ssmkit  # noqa: E402
from checks import assert_close  # noqa: E402
from test_model import TOLERANCE  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CLI = os.environ.get("SSMKIT_CLI", os.path.join(ROOT, "build", "release", "ssmkit"))
GRANITE_DENSE = os.path.join(ROOT, "tests", "fixtures", "models", "granitemoehybrid-dense")
# (name, how the run starts, transformers' layer_types, position_embedding_type)
RUNS = [
    ("arch-hybrid", ["--arch", "hybrid", "--attention-every", "2"],
     ["linear_attention", "full_attention"], "rope"),
    ("init-granite-dense", ["--init", GRANITE_DENSE],
     ["linear_attention", "linear_attention", "full_attention"], "nope"),
]
SEQLEN, VAL_FRACTION = 32, 0.1
WORDS = ("the state space model reads one byte at a time and keeps what it needs while "
         "attention looks back over every token it has seen").split()


@pytest.fixture(scope="module", params=RUNS, ids=[r[0] for r in RUNS])
def trained(request, tmp_path_factory):
    name, start, layer_types, position = request.param
    assert os.path.exists(CLI), f"{CLI}: build the release preset first (or set SSMKIT_CLI)"
    root = tmp_path_factory.mktemp(name)
    rng = np.random.default_rng(5)
    text = "\n".join(" ".join(rng.choice(WORDS, size=rng.integers(4, 12)))
                     for _ in range(900)).encode()
    data = root / "data.txt"
    data.write_bytes(text)
    out = root / "ckpt"
    subprocess.run([CLI, "--threads", "2", "train", "--data", str(data), "--out", str(out),
                    *start, "--steps", "30", "--batch", "4", "--seqlen", str(SEQLEN), "--warmup",
                    "5", "--eval-every", "30", "--val-fraction", str(VAL_FRACTION)],
                   check=True, capture_output=True)
    return dict(path=out, text=text, layer_types=layer_types, position=position)


def transformers_model(path):
    model, info = transformers.GraniteMoeHybridForCausalLM.from_pretrained(
        path, dtype=torch.float32, output_loading_info=True)
    return model.eval(), info


def validation_windows(text):
    """The trainer's validation windows (src/train/data.hpp): consecutive windows of L + 1
    bytes from the start of the held-out end of the file, sharing their boundary bytes."""
    split = len(text) - int(len(text) * VAL_FRACTION)
    val = np.frombuffer(text[split:], np.uint8).astype(np.int64)
    n = (len(val) - 1) // SEQLEN
    return np.stack([val[i * SEQLEN:i * SEQLEN + SEQLEN + 1] for i in range(n)])


def test_transformers_loads_it_whole(trained):
    model, info = transformers_model(trained["path"])
    assert type(model).__name__ == "GraniteMoeHybridForCausalLM"
    assert model.config.layer_types == trained["layer_types"]
    assert model.config.position_embedding_type == trained["position"]
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info[key], f"{key}: {info[key]}"


def test_logits_equal_the_engines(trained):
    model, _ = transformers_model(trained["path"])
    session = ssmkit.Model.load(str(trained["path"])).session()
    for window in validation_windows(trained["text"])[:3]:
        ids = window[:SEQLEN]
        with torch.no_grad():
            theirs = model(torch.from_numpy(ids)[None]).logits[0].numpy()
        ours = session.prefill([int(i) for i in ids], all_logits=True)[0]
        assert_close(ours, theirs, TOLERANCE, "engine vs transformers, every position")


def test_validation_loss_equals_the_trainers(trained):
    model, _ = transformers_model(trained["path"])
    windows = torch.from_numpy(validation_windows(trained["text"]))
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                 windows[:, 1:].reshape(-1)).item()
    last = (trained["path"] / "log.tsv").read_text().strip().splitlines()[-1].split("\t")
    logged = float(last[3])  # val_loss of the last step: every validation window
    print(f"validation loss: trainer {logged:.7f}, transformers {loss:.7f}")
    assert abs(loss - logged) <= 1e-5 * logged
