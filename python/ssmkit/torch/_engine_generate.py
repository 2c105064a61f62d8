"""generate() of an accelerated model, run whole in ssmkit's engine when it can be.

transformers' generate() calls the model once per token, and each call walks every layer in
Python (tens of torch and ssmkit calls per layer); at batch 1 that costs more than the step's
arithmetic. For the calls whose result the engine can produce exactly as transformers would,
greedy search with no logits processor but the minimum length's (max_new_tokens / max_length,
min_new_tokens / min_length, eos and pad tokens, left-padded batches), this generate() binds the model's parameters to an engine model in place
(Model::FromTensors: nothing is copied but the small vectors, so it is rebuilt on every call
and always sees the current parameters), prefills the prompts in one call and decodes one
engine step per token. Any other call (sampling, beams, streamers, processors, outputs with
scores, parameters off the CPU, ...) goes to transformers' own generate(), which still runs
ssmkit's kernels through the accelerated modules.
"""
import numpy as np
import torch

from .. import _ssmkit
from .._model import Model

_ENGINE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _falsy(v):
    return not v


def _one(v):
    return v in (None, 1)


def _any(v):
    return True


# GenerationConfig fields a greedy engine run honours or that greedy search ignores, with what
# they may be set to; every other field must keep its default, else transformers generates.
_ACCEPTED = {
    "max_length": _any, "max_new_tokens": _any, "pad_token_id": _any, "bos_token_id": _any,
    "eos_token_id": _any, "decoder_start_token_id": _any, "use_cache": _any,
    "transformers_version": _any, "_from_model_config": _any, "do_sample": _falsy,
    "num_beams": _one, "num_return_sequences": _one, "repetition_penalty": lambda v: v in (None, 1.0),
    "min_length": _any, "min_new_tokens": _any, "no_repeat_ngram_size": _falsy,
    "output_attentions": _falsy, "output_hidden_states": _falsy, "output_scores": _falsy,
    "output_logits": _falsy, "return_dict_in_generate": _falsy, "remove_invalid_values": _falsy,
    # Sampling's and beam search's own settings, unused by greedy search.
    "temperature": _any, "top_k": _any, "top_p": _any, "min_p": _any, "typical_p": _any,
    "epsilon_cutoff": _any, "eta_cutoff": _any, "top_h": _any, "length_penalty": _any,
    "early_stopping": _any,
}


def _greedy_config(model, generation_config, kwargs):
    """The GenerationConfig of this call when the engine can run it, else None."""
    from transformers import GenerationConfig
    base = generation_config if generation_config is not None else model.generation_config
    config = GenerationConfig.from_dict(base.to_dict())
    unused = config.update(**kwargs)
    if unused:  # streamer=, logits_processor=, a model keyword, ...
        return None
    defaults = GenerationConfig().to_dict()
    for key, value in config.to_dict().items():
        if value == defaults.get(key):
            continue
        accept = _ACCEPTED.get(key)
        if accept is None or not accept(value):
            return None
    return config


def _prompts(input_ids, attention_mask):
    """Each row's tokens without its left padding, or None when the mask is not left padding."""
    ids = input_ids.numpy()
    if attention_mask is None:
        return [list(map(int, row)) for row in ids]
    mask = attention_mask.numpy()
    prompts = []
    for row, m in zip(ids, mask):
        start = int(np.argmax(m != 0)) if m.any() else len(m)
        if start == len(m) or not np.all(m[start:] == 1) or np.any(m[:start] != 0):
            return None
        prompts.append(list(map(int, row[start:])))
    return prompts


def _engine_model(model):
    """The model's parameters bound to an engine model, or None when they cannot be."""
    tensors = {}
    for name, p in model.named_parameters():
        if p.device.type != "cpu" or p.dtype not in _ENGINE_DTYPES or not p.is_contiguous():
            return None
        tensors[name] = p.detach()
    try:
        return Model(_ssmkit._Model._from_tensors(model.config.to_json_string(use_diff=False),
                                                  tensors))
    except (_ssmkit.InvalidArgumentError, _ssmkit.UnsupportedError):
        return None  # a class or setting the engine does not load: transformers runs it


def engine_generate(self, inputs=None, generation_config=None, **kwargs):
    """The accelerated model's generate(): see the module's docstring."""
    input_ids = inputs if inputs is not None else kwargs.get("input_ids")
    attention_mask = kwargs.get("attention_mask")
    rest = {k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask")}
    config = _greedy_config(self, generation_config, rest)
    prompts = None
    if (config is not None and isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2
            and input_ids.device.type == "cpu" and input_ids.shape[1] > 0
            and (attention_mask is None or attention_mask.shape == input_ids.shape)):
        prompts = _prompts(input_ids, attention_mask)
    engine = _engine_model(self) if prompts is not None and all(prompts) else None
    if engine is None:
        return type(self).generate(self, inputs, generation_config, **kwargs)
    return _greedy(engine, input_ids, prompts, config)


def _greedy(engine, input_ids, prompts, config):
    """transformers' greedy search on the engine: no end-of-sequence token before the minimum
    length (its logits at -inf, as MinNewTokensLengthLogitsProcessor / MinLengthLogitsProcessor
    set them), finished rows continue with the pad token, and the search stops once every row
    has produced an end-of-sequence token."""
    eos = config.eos_token_id
    eos = set() if eos is None else {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}
    pad = config.pad_token_id if config.pad_token_id is not None else (min(eos) if eos else 0)
    length = input_ids.shape[1]
    if config.max_new_tokens is not None:
        steps = config.max_new_tokens
    else:
        steps = (config.max_length if config.max_length is not None else 20) - length
    min_new = max(config.min_new_tokens or 0, (config.min_length or 0) - length)
    eos_ids = sorted(eos)
    batch = len(prompts)
    session = engine.session(batch=batch)
    out = np.empty((batch, max(steps, 0)), np.int64)
    finished = np.zeros(batch, bool)
    logits = session.prefill(prompts) if steps > 0 else None
    out_logits = np.empty((batch, session.vocab_size), np.float32)
    n = 0
    while n < steps:
        if n < min_new and eos_ids:
            logits[:, eos_ids] = -np.inf
        token = np.argmax(logits, axis=1)
        token = np.where(finished, pad, token)
        out[:, n] = token
        n += 1
        finished |= np.isin(token, eos_ids)
        if finished.all() or n == steps:
            break
        logits = session.decode(token.astype(np.int32), out=out_logits)
    return torch.cat([input_ids, torch.from_numpy(out[:, :n]).to(input_ids.dtype)], dim=1)
