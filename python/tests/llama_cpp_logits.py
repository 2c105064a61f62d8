"""llama.cpp's logits for a GGUF file, through libllama's C API (ctypes), for the tests that
check llama.cpp loads the files `ssmkit quantize` writes (test_quantize_hybrid.py). Run as a
child process, so that a file llama.cpp refuses, or crashes on, fails one test only:

    python llama_cpp_logits.py LIBDIR MODEL.gguf OUT.npz ID [ID ...]

LIBDIR holds libllama.so (a llama.cpp build's bin/ directory). OUT.npz gets
  prefill  (V,)    the last position's logits of the whole prompt in one llama_decode call;
  decode   (L, V)  the logits at every position, the prompt fed one token per call from a
                   fresh context (llama.cpp's decode path).
A file llama.cpp does not load exits with status 2.

llama.cpp's parameter structs are passed as llama_model_default_params() /
llama_context_default_params() return them (n_ctx 512, one sequence): they are held as opaque
bytes, larger than the structs (the C ABIs pass and return structs of this size through memory,
so only their first bytes are read), and no field is set, so no layout is assumed but
llama_batch's."""
import ctypes
import os
import sys

import numpy as np


class Batch(ctypes.Structure):  # llama.h's llama_batch
    _fields_ = [("n_tokens", ctypes.c_int32), ("token", ctypes.POINTER(ctypes.c_int32)),
                ("embd", ctypes.POINTER(ctypes.c_float)), ("pos", ctypes.POINTER(ctypes.c_int32)),
                ("n_seq_id", ctypes.POINTER(ctypes.c_int32)),
                ("seq_id", ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))),
                ("logits", ctypes.POINTER(ctypes.c_int8))]


class Params(ctypes.Structure):  # llama_model_params / llama_context_params, opaque
    _fields_ = [("bytes", ctypes.c_uint8 * 4096)]


LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def load(libdir):
    lib = ctypes.CDLL(os.path.join(libdir, "libllama.so"))
    p = ctypes.c_void_p
    for name, res, args in [
            ("llama_log_set", None, [LOG, p]),
            ("llama_backend_init", None, []),
            ("llama_model_default_params", Params, []),
            ("llama_context_default_params", Params, []),
            ("llama_model_load_from_file", p, [ctypes.c_char_p, Params]),
            ("llama_init_from_model", p, [p, Params]),
            ("llama_model_get_vocab", p, [p]),
            ("llama_vocab_n_tokens", ctypes.c_int32, [p]),
            ("llama_batch_get_one", Batch, [ctypes.POINTER(ctypes.c_int32), ctypes.c_int32]),
            ("llama_decode", ctypes.c_int32, [p, Batch]),
            ("llama_get_logits_ith", ctypes.POINTER(ctypes.c_float), [p, ctypes.c_int32]),
            ("llama_free", None, [p]),
            ("llama_model_free", None, [p])]:
        getattr(lib, name).restype = res
        getattr(lib, name).argtypes = args
    return lib


def run(lib, model, n_vocab, chunks):
    """Feeds `chunks` (lists of ids) to a fresh context, one llama_decode each; returns the
    last position's logits after each."""
    ctx = lib.llama_init_from_model(model, lib.llama_context_default_params())
    if not ctx:
        sys.exit("llama_init_from_model failed")
    out = []
    for chunk in chunks:
        ids = (ctypes.c_int32 * len(chunk))(*chunk)
        if lib.llama_decode(ctx, lib.llama_batch_get_one(ids, len(chunk))) != 0:
            sys.exit("llama_decode failed")
        out.append(np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), (n_vocab,)).copy())
    lib.llama_free(ctx)
    return np.stack(out)


def main():
    libdir, path, out, *ids = sys.argv[1:]
    ids = [int(i) for i in ids]
    lib = load(libdir)
    quiet = LOG(lambda level, text, data: None)
    if not os.environ.get("SSMKIT_LLAMA_CPP_VERBOSE"):
        lib.llama_log_set(quiet, None)
    lib.llama_backend_init()
    model = lib.llama_model_load_from_file(path.encode(), lib.llama_model_default_params())
    if not model:
        print(f"llama.cpp did not load {path} (SSMKIT_LLAMA_CPP_VERBOSE=1 shows its log)",
              file=sys.stderr)
        sys.exit(2)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    prefill = run(lib, model, n_vocab, [ids])[0]
    decode = run(lib, model, n_vocab, [[i] for i in ids])
    lib.llama_model_free(model)
    np.savez(out, prefill=prefill, decode=decode)


if __name__ == "__main__":
    main()
