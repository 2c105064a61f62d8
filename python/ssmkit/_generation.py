"""Tokenizers and text generation over ssmkit's engine (include/ssmkit/tokenizer.hpp,
generate.hpp): a TokenStream draws one token per step from the C++ Generator, with the text it
completes, and applies the stop strings; Model.generate runs one to the end."""
import dataclasses
import operator
from typing import List, NamedTuple, Optional

import numpy as np

from . import _ids
from ._ssmkit import InvalidArgumentError, _Generator, _Tokenizer


class Tokenizer:
    """A Hugging Face tokenizer.json (BPE), a GGUF file's vocabulary (model.tokenizer), or raw
    bytes (token i is byte i)."""

    def __init__(self, handle):
        if not isinstance(handle, _Tokenizer):
            raise TypeError("use Tokenizer.from_file(path), Tokenizer.bytes() or model.tokenizer")
        self._handle = handle

    @classmethod
    def from_file(cls, path):
        return cls(_Tokenizer.from_file(str(path)))

    @classmethod
    def bytes(cls):
        return cls(_Tokenizer.bytes())

    @classmethod
    def _for_model(cls, model_handle):
        return cls(_Tokenizer.for_model(model_handle))

    @property
    def vocab_size(self):
        """The largest id + 1."""
        return self._handle.vocab_size

    @property
    def name(self):
        return self._handle.name

    def encode(self, text):
        """The token ids of `text` (a str): a list of ints."""
        if not isinstance(text, str):
            raise TypeError(f"encode: text: expected a str, given {type(text).__name__}")
        return self._handle.encode(text)

    def decode(self, ids, skip_special=False):
        """The text of token ids (invalid UTF-8 replaced by U+FFFD; unknown ids contribute
        nothing; special tokens are left out with skip_special)."""
        return self._handle.decode(_ids.sequence(ids, "decode: ids"), bool(skip_special))

    def token_id(self, token):
        """The id of a token's text (e.g. "<|endoftext|>"), or None."""
        return self._handle.token_id(token)

    def __repr__(self):
        return f"ssmkit.Tokenizer({self.name})"


class Token(NamedTuple):
    """One generated token: its id and the text it adds (None when the model has no
    tokenizer; "" when its bytes end a character only a later token completes, or when the
    text is held back because it may start a stop string)."""
    id: int
    text: Optional[str]


@dataclasses.dataclass
class Generation:
    """The result of a generation. text: the continuation (None without a tokenizer); ids:
    every generated token (the end-of-sequence token included, when it ended there);
    finish_reason: "length" (max_new_tokens), "eos", "stop" (a stop string: the text ends
    before it), "stopped" (the callback or TokenStream.stop()), None while still running."""
    text: Optional[str]
    ids: List[int]
    prompt_ids: List[int]
    finish_reason: Optional[str]
    prefill_seconds: float
    decode_seconds: float


def generation_options(config, max_new_tokens, temperature, top_k, top_p, seed, ignore_eos):
    """The arguments of _Generator after the session and prompt, checked for their Python
    types (the engine checks the values: max_new_tokens >= 0, temperature >= 0, ...)."""
    seed = operator.index(seed)
    if not 0 <= seed < 2**64:
        raise InvalidArgumentError(f"generate: seed: expected 0 <= seed < 2**64, given {seed}")
    eos = config["eos_token_id"]
    return (operator.index(max_new_tokens), float(temperature), operator.index(top_k),
            float(top_p), seed, -1 if ignore_eos or eos is None else eos)


def _stop_strings(stop):
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise InvalidArgumentError(f"generate: stop: expected non-empty strings, given {s!r}")
    return stops


class TokenStream:
    """Iterator of Token: generation one token per step (Model.stream makes one)."""

    def __init__(self, session, prompt_ids, options, tokenizer, skip_special, stop):
        self._stops = _stop_strings(stop)
        if self._stops and tokenizer is None:
            raise InvalidArgumentError("generate: stop: stop strings need a tokenizer, and this "
                                       "model has none")
        self._prompt = [int(t) for t in prompt_ids]
        self._generator = _Generator(session, np.ascontiguousarray(prompt_ids, np.int32),
                                     *options, tokenizer._handle if tokenizer else None,
                                     bool(skip_special))
        self._has_text = tokenizer is not None
        self._ids = []
        self._pieces = []  # the text handed out
        self._held = ""    # text not handed out yet: it may be the start of a stop string
        self._finish = None

    def __iter__(self):
        return self

    def __next__(self):
        if self._finish is not None:
            raise StopIteration
        step = self._generator.next()
        if step is None:  # max_new_tokens = 0
            self._finish = "length"
            raise StopIteration
        token, piece, last = step
        self._ids.append(token)
        text = None if piece is None else self._release(piece, last)
        if last and self._finish is None:
            self._finish = "eos" if self._generator.stats["stopped_at_eos"] else "length"
        return Token(token, text)

    def stop(self):
        """Ends the generation before its end (finish_reason "stopped")."""
        if self._finish is None:
            self._finish = "stopped"

    @property
    def generation(self):
        """The result so far (final once the iterator is exhausted or stopped)."""
        stats = self._generator.stats
        text = "".join(self._pieces) + self._held if self._has_text else None
        return Generation(text=text, ids=list(self._ids), prompt_ids=list(self._prompt),
                          finish_reason=self._finish, prefill_seconds=stats["prefill_seconds"],
                          decode_seconds=stats["decode_seconds"])

    def _release(self, piece, last):
        """The text to hand out now, after the stop strings: everything up to a stop string
        (which ends the generation), else all but the longest tail that could begin one."""
        text = self._held + piece
        self._held = ""
        found = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        if found:
            text = text[:min(found)]
            self._finish = "stop"
        elif not last:
            keep = self._stop_prefix_length(text)
            text, self._held = text[:len(text) - keep], text[len(text) - keep:]
        self._pieces.append(text)
        return text

    def _stop_prefix_length(self, text):
        """The length of the longest tail of `text` that is a proper prefix of a stop string."""
        longest = max((len(s) for s in self._stops), default=1)
        for k in range(min(len(text), longest - 1), 0, -1):
            if any(s.startswith(text[-k:]) for s in self._stops):
                return k
        return 0
