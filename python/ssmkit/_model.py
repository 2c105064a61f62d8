"""Models and their logits: ssmkit's inference engine (include/ssmkit/model.hpp) on numpy.

    model = ssmkit.Model.load("path/to/checkpoint")   # or Model.load() for the built-in model
    session = model.session(batch=2)
    last = session.prefill([[5, 6, 7], [8, 9]])          # (B, V) float32
    step = session.decode([10, 11])                      # (B, V) float32
"""
import numpy as np

from . import _ids
from ._generation import TokenStream, Tokenizer, generation_options
from ._ssmkit import InvalidArgumentError, _Model, _Session


class Session:
    """The state of up to `max_batch` sequences: a prefill of prompts, then one token per
    sequence per decode step. Not for two threads at once (calls are serialised).
    device="cuda" runs the engine on the GPU (pure Mamba-1 / Mamba-2 models; all_logits is
    not available there: docs/cuda.md)."""

    def __init__(self, model, max_batch=1, device="cpu"):
        self._model = model
        self._device = device
        self._session = _Session(model._handle, max_batch, device)

    @property
    def device(self):
        return self._device

    @property
    def model(self):
        return self._model

    @property
    def max_batch(self):
        return self._session.max_batch

    @property
    def batch(self):
        """B of the last prefill (0 before any, or after reset())."""
        return self._session.batch

    @property
    def vocab_size(self):
        """V, the width of a row of logits (the padded vocabulary)."""
        return self._session.vocab_size

    def prefill(self, ids, all_logits=False):
        """Runs prompts from a fresh state. ids: one prompt (a list of ints or an (L) array), a
        batch ((B, L) array) or a list of prompts of any lengths (1 <= B <= max_batch). Returns
        the logits at each prompt's last token, (B, V) float32; with all_logits=True the logits
        at every position instead, (B, L, V) with L the longest prompt (rows past a shorter
        prompt's end are NaN)."""
        tokens, lengths = _ids.batch(ids)
        B, L = tokens.shape
        last = np.empty((B, self.vocab_size), np.float32)
        every = np.full((B, L, self.vocab_size), np.nan, np.float32) if all_logits else None
        self._session.prefill(tokens, lengths, last, every)
        return every if all_logits else last

    def decode(self, ids, out=None):
        """One token for each of the B sequences of the last prefill (an int when B is 1, else
        a list or (B) array): their next logits, (B, V) float32, written into `out` when given
        (a C-contiguous float32 (B, V) array: a decode loop that allocates nothing)."""
        tokens = _ids.sequence(np.atleast_1d(ids) if np.ndim(ids) == 0 else ids, "decode: ids")
        shape = (tokens.shape[0], self.vocab_size)
        if out is None:
            out = np.empty(shape, np.float32)
        elif not (isinstance(out, np.ndarray) and out.dtype == np.float32 and
                  out.flags.c_contiguous and out.flags.writeable):
            raise TypeError("decode: out: expected a writable C-contiguous float32 numpy array, "
                            f"given {type(out).__name__}"
                            f"{' ' + str(out.dtype) if isinstance(out, np.ndarray) else ''}")
        self._session.decode(tokens, out)
        return out

    def reset(self):
        """Forgets the sequences (decode needs a new prefill). A prefill always starts from a
        fresh state, so this is only needed to drop the state early."""
        self._session = _Session(self._model._handle, self.max_batch, self._device)


class Model:
    """A Mamba-1 or Mamba-2 language model: a Hugging Face checkpoint (MambaForCausalLM,
    Mamba2ForCausalLM) or the state-spaces format, memory-mapped. Use Model.load()."""

    def __init__(self, handle):
        if not isinstance(handle, _Model):
            raise TypeError("use ssmkit.Model.load(path) to make a Model")
        self._handle = handle
        self._tokenizer = None

    @classmethod
    def load(cls, path=None):
        """The checkpoint in directory `path` (config.json, model.safetensors or its shards,
        tokenizer.json when it has one), or a GGUF file of a Mamba-1 / Mamba-2 model (its
        tokenizer from the metadata; docs/gguf.md); None: the built-in model
        (docs/default_model.md)."""
        if path is None:
            return cls(_Model.load_default())
        return cls(_Model.load(str(path)))

    @property
    def path(self):
        return self._handle.dir

    @property
    def config(self):
        """The model's configuration: arch ("mamba1" | "mamba2"), format ("hf" |
        "state-spaces" | "gguf"), d_model, n_layer, vocab_size (padded rows), config_vocab_size, d_inner,
        d_state, d_conv, ..., bos/eos/pad_token_id (None when the checkpoint names none)."""
        return self._handle.config

    @property
    def parameter_count(self):
        return self._handle.parameter_count

    @property
    def weight_dtype(self):
        """"f32", "bf16", "f16", a quantized type ("q8_0", "q4_k", ...) or "mixed": the dtype
        of the projection matrices."""
        return self._handle.weight_dtype

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer.json, or raw bytes for a byte-level model (vocab <= 256)
        without one; InvalidArgumentError when it has neither."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer._for_model(self._handle)
        return self._tokenizer

    def session(self, batch=1, device="cpu"):
        """A Session for up to `batch` sequences, on the CPU or the GPU ("cuda")."""
        return Session(self, batch, device)

    def logits(self, ids):
        """Every position's logits of prompts (as Session.prefill takes them): (B, L, V)."""
        tokens, _ = _ids.batch(ids)
        return Session(self, tokens.shape[0]).prefill(ids, all_logits=True)

    def perplexity(self, text, context=512, *, max_chunks=0, batch=1):
        """The perplexity of `text` (a string, encoded with the model's tokenizer, or token ids)
        as llama.cpp's llama-perplexity measures it: chunks of `context` tokens, each from a
        fresh state, the second half of each scored (at most max_chunks chunks, 0: all; `batch`
        chunks run together). Returns a dict: perplexity, perplexity_stderr, mean_nll (nats per
        scored token), nll_stderr, chunks, scored_tokens."""
        if isinstance(text, str):
            ids = np.asarray(self.tokenizer.encode(text), np.int32)
        else:
            ids = _ids.sequence(text, "text")
        return self._handle.perplexity(ids, context, max_chunks, batch)

    def stream(self, prompt="", max_new_tokens=128, *, temperature=0.0, top_k=0, top_p=1.0,
               seed=0, stop=None, ignore_eos=False, skip_special=True, device="cpu"):
        """Generates token by token: an iterator of Token(id, text) (see generate for the
        arguments); its .generation holds the result once it has ended."""
        tokenizer = self._tokenizer_if_any(prompt)
        if isinstance(prompt, str):
            ids = np.asarray(tokenizer.encode(prompt), np.int32)
        else:
            ids = _ids.sequence(prompt, "prompt")
        options = generation_options(self.config, max_new_tokens, temperature, top_k, top_p,
                                     seed, ignore_eos)
        return TokenStream(_Session(self._handle, 1, device), ids, options, tokenizer,
                           skip_special, stop)

    def generate(self, prompt="", max_new_tokens=128, *, temperature=0.0, top_k=0, top_p=1.0,
                 seed=0, stop=None, callback=None, ignore_eos=False, skip_special=True,
                 device="cpu"):
        """Continues `prompt` (text, or a list of token ids; empty: the beginning of text) by
        at most max_new_tokens tokens. temperature 0 is greedy; else sampling with top_k (0:
        off), top_p (1: off) and seed. Stops at the model's end-of-sequence token (unless
        ignore_eos), at the first of the `stop` strings (the text ends before it), or when
        callback(token_id, text) returns True. device="cuda" generates on the GPU. Returns a
        Generation (text, ids, finish_reason, timings)."""
        stream = self.stream(prompt, max_new_tokens, temperature=temperature, top_k=top_k,
                             top_p=top_p, seed=seed, stop=stop, ignore_eos=ignore_eos,
                             skip_special=skip_special, device=device)
        for token in stream:
            if callback is not None and callback(token.id, token.text):
                stream.stop()
        return stream.generation

    def _tokenizer_if_any(self, prompt):
        """The tokenizer: required for a text prompt, else used when the model has one."""
        if isinstance(prompt, str):
            return self.tokenizer
        try:
            return self.tokenizer
        except InvalidArgumentError:
            return None

    def __repr__(self):
        c = self.config
        return (f"ssmkit.Model({c['arch']}, d_model={c['d_model']}, n_layer={c['n_layer']}, "
                f"vocab={c['vocab_size']}, {self.weight_dtype}, path={self.path!r})")


__all__ = ["Model", "Session"]
