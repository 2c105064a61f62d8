"""accelerate(model): a transformers Mamba / Mamba-2 model (or a hybrid whose mixers are
theirs) runs its forward, backward and generate() on ssmkit's kernels.

transformers' Mamba-family mixers call module-level functions by fixed names
(mamba_selective_scan, mamba2_chunk_scan, causal_conv1d_fn, causal_conv1d_update, the two
selective_state_update functions, and the fused mamba_inner_fn /
mamba2_split_conv1d_scan_combined that return None without mamba_ssm); in PyTorch they are
step-by-step loops or chunked einsums. For each mixer of the model, accelerate() binds to that
instance a copy of its class's forward (decorators included) whose globals map those names to
ssmkit's kernels; everything else is transformers' own code, the cache handling of generate()
included. The RMSNorm modules whose forward is transformers' Mamba / Mamba-2 one (the same
bytecode: the hybrids copy them) get ssmkit's norm kernel the same way, and every nn.Linear
(the projections, the LM head) runs decode-sized inputs on ssmkit's linear kernel. The model's
generate() runs greedy search whole in ssmkit's engine over the same parameters, one engine
call per token (_engine_generate.py), and every other search through transformers' loop.

Nothing else changes: the model keeps its class, parameters, buffers and state dict, other
instances of the class are untouched, and `del module.forward` on a module (`del
model.generate` on the model) undoes it. Needs
transformers >= 5.15 (whose mixers call these functions, from 5.25 through helpers of their
module, which are copied the same way); tested with 5.15, 5.24 and 5.25.
"""
import functools
import types

import torch

from . import _functions as F
from ._engine_generate import engine_generate
from ._mixer_cache import conv_seq_idx
from .. import _ssmkit

_LINEAR_MAX_ROWS = _ssmkit.linear_gemv_max_rows

# transformers hands a mixer's keyword arguments (the model's, e.g. a packing collator's) on
# to these kernels. Like its mamba_ssm path, which keeps only the kernel's own parameters, the
# forms below read mamba_ssm's names of packed sequences, seq_idx and cu_seqlens, and ignore
# the rest (a hybrid's attention arguments such as cu_seq_lens_q). Either one keeps the
# sequences apart in both the convolution and the scan (mamba_ssm's scan reads cu_seqlens
# only for its varlen states, its convolution not at all).


def _causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, seq_idx=None,
                      cu_seqlens=None, **kwargs):
    seq_idx = conv_seq_idx(seq_idx, cu_seqlens, hidden_states.shape[-1])
    return F.causal_conv1d_fn(hidden_states, weight, bias, seq_idx=seq_idx,
                              activation=activation)


def _unpacked_causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
    """The convolution of transformers' Mamba mixer, whose scan gets no packing arguments:
    packed input would restart the convolution but not the scan, so it is refused."""
    for name in ("seq_idx", "cu_seqlens"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(
                f"ssmkit.torch.accelerate: {name}: transformers' Mamba (Mamba-1) mixer passes "
                f"no packed-sequence arguments to its scan, so packed sequences would run into "
                f"each other; use ssmkit.torch.Mamba (seq_idx / cu_seqlens) or a Mamba-2 model")
    return F.causal_conv1d_fn(hidden_states, weight, bias, activation=activation)


def _causal_conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None,
                          **kwargs):
    return F.causal_conv1d_update(hidden_states, conv_state, weight, bias, activation)


def _fused_unavailable(*args, **kwargs):
    """mamba_inner_fn / mamba2_split_conv1d_scan_combined: None makes the mixer take its
    unfused path, whose pieces are ssmkit's."""
    return None


def _selective_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None,
                    delta_softplus=False, return_last_state=False, **kwargs):
    """transformers' Mamba mixer passes no packing arguments to its scan (mamba_ssm's has
    none); this one takes none either."""
    return F.selective_scan_fn(hidden_states, dt, A, B, C, D, z=z, delta_bias=delta_bias,
                               delta_softplus=delta_softplus,
                               return_last_state=return_last_state)


def _selective_state_update(state, hidden_states, dt, A, B, C, D=None, dt_bias=None,
                            dt_softplus=False, z=None, **kwargs):
    return F.selective_state_update(state, hidden_states, dt, A, B, C, D, z=z, dt_bias=dt_bias,
                                    dt_softplus=dt_softplus)


def _chunk_scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None,
                initial_states=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                return_final_states=False, z=None, seq_idx=None, cu_seqlens=None, **kwargs):
    return F.mamba_chunk_scan_combined(
        hidden_states, dt, A, B, C, chunk_size=chunk_size, D=D, z=z, dt_bias=dt_bias,
        initial_states=initial_states, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
        dt_softplus=dt_softplus, dt_limit=dt_limit, return_final_states=return_final_states)


KERNELS = {
    "causal_conv1d_fn": _causal_conv1d_fn,
    "causal_conv1d_update": _causal_conv1d_update,
    "mamba_inner_fn": _fused_unavailable,
    "mamba2_split_conv1d_scan_combined": _fused_unavailable,
    "mamba_selective_scan": _selective_scan,
    "mamba_selective_state_update": _selective_state_update,
    "mamba2_selective_state_update": _selective_state_update,
    "mamba2_chunk_scan": _chunk_scan,
}
# What a Mamba-1 mixer (one calling mamba_selective_scan) gets instead.
MAMBA1_KERNELS = {**KERNELS, "causal_conv1d_fn": _unpacked_causal_conv1d_fn}
# A mixer is a module whose forward calls one of these (the others are shared helpers).
_SCANS = ("mamba_selective_scan", "mamba2_chunk_scan")


# ------------------------------------------------------------------ rebinding forwards


def _inner(fn):
    """The function a decorator's wrapper `fn` calls: its __wrapped__ (functools.wraps), else
    the one Python function in its closure (decorators without functools.wraps, e.g.
    transformers 5.15's force_accelerate_hooks); None for an undecorated function."""
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None:
        return inner
    held = [c.cell_contents for c in fn.__closure__ or ()
            if isinstance(c.cell_contents, types.FunctionType)]
    return held[0] if len(held) == 1 else None


def _innermost(fn):
    while isinstance(fn, types.FunctionType) and _inner(fn) is not None:
        fn = _inner(fn)
    return fn


def _as_function(value):
    """The Python function a global holds: itself, or the function an object wraps when its
    class's forward holds one (the kernels package's hub wrappers, modules calling it)."""
    if isinstance(value, types.FunctionType):
        return value
    forward = getattr(type(value), "forward", None) if callable(value) else None
    return _inner(forward) if isinstance(forward, types.FunctionType) else None


def _helpers(fn):
    """{name: function} for the global names `fn` reads that hold functions of its own module
    (transformers >= 5.25 moved its mixers' scan and convolution calls into such helpers, e.g.
    mamba_scan_forward and causal_conv1d_forward, which then call the kernels)."""
    fn = _innermost(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    found = {}
    for name in code.co_names:
        helper = _as_function(fn.__globals__.get(name))
        own_module = getattr(_innermost(helper), "__globals__", None) is fn.__globals__
        if helper is not None and own_module:
            found[name] = helper
    return found


def _with_globals(fn, replacements, _copies=None):
    """A copy of `fn` whose global names in `replacements` resolve to the replacements, and
    whose helpers (_helpers) that reach one of them are such copies too. A decorated function
    is copied through its decorators: each wrapper is rebuilt around the copy of what it wraps,
    found in its closure."""
    copies = {} if _copies is None else _copies  # id(function) -> its copy, made once
    inner = _inner(fn)
    if inner is None:
        names = {k: v for k, v in replacements.items() if k in fn.__code__.co_names}
        for name, helper in _helpers(fn).items():
            if name not in names and _calls(helper, tuple(replacements)):
                if id(helper) not in copies:
                    copies[id(helper)] = helper  # a helper reaching itself keeps the original
                    copies[id(helper)] = _with_globals(helper, replacements, copies)
                names[name] = copies[id(helper)]
        clone = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                                   fn.__defaults__, fn.__closure__)
    else:
        new_inner = _with_globals(inner, replacements, copies)
        cells = fn.__closure__ or ()
        if not any(c.cell_contents is inner for c in cells):
            raise TypeError(f"ssmkit.torch.accelerate: cannot rebuild the decorator around "
                            f"{inner.__qualname__} (it does not hold the function it wraps)")
        cells = tuple(types.CellType(new_inner) if c.cell_contents is inner else c
                      for c in cells)
        clone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                   cells)
        if hasattr(fn, "__wrapped__"):
            functools.update_wrapper(clone, new_inner)
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


def _calls(fn, names, _seen=None):
    """Whether the innermost function of `fn`, or a helper of its module it calls (_helpers,
    followed through), reads any of `names` as a global."""
    fn = _innermost(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    if any(name in code.co_names for name in names):
        return True
    seen = set() if _seen is None else _seen
    seen.add(id(fn))
    return any(_calls(helper, names, seen) for helper in _helpers(fn).values()
               if id(_innermost(helper)) not in seen)


def _is_accelerated(module):
    return getattr(module.__dict__.get("forward"), "_ssmkit_accelerated", False)


def _bind(module, fn):
    fn._ssmkit_accelerated = True
    module.forward = types.MethodType(fn, module)


# ------------------------------------------------------------------ norms


def _rmsnorm(self, hidden_states):
    """transformers' MambaRMSNorm / Mamba2RMSNorm: weight * x / rms(x), in f32."""
    if hidden_states.dtype != self.weight.dtype:  # its dtype promotion is not ours: keep it
        return type(self).forward(self, hidden_states)
    return F.rmsnorm_fn(hidden_states, self.weight, None, eps=self.variance_epsilon)


def _gated_rmsnorm(self, hidden_states, gate=None):
    """transformers' MambaRMSNormGated: weight * g / rms(g) per group, g = x * silu(gate)
    (one group over all features in the versions before it had group_size)."""
    if hidden_states.dtype != self.weight.dtype:
        return type(self).forward(self, hidden_states, gate)
    return F.rmsnorm_fn(hidden_states, self.weight, None, z=gate, eps=self.variance_epsilon,
                        group_size=getattr(self, "group_size", None), norm_before_gate=False)


def _code_key(fn):
    code = fn.__code__
    return code.co_code, code.co_consts, code.co_names


def _norm_replacements():
    """{bytecode of transformers' norm forward: ssmkit's}, for the classes this version has."""
    table = {}
    try:
        from transformers.models.mamba import modeling_mamba
        from transformers.models.mamba2 import modeling_mamba2
    except ImportError:
        return table
    for cls, ours in ((getattr(modeling_mamba, "MambaRMSNorm", None), _rmsnorm),
                      (getattr(modeling_mamba2, "Mamba2RMSNorm", None), _rmsnorm),
                      (getattr(modeling_mamba2, "MambaRMSNormGated", None), _gated_rmsnorm)):
        if cls is not None:
            table[_code_key(cls.forward)] = ours
    return table


# ------------------------------------------------------------------ linear layers

_LINEAR_WEIGHTS = (torch.float32, torch.bfloat16, torch.float16)


def _linear(self, input):
    """nn.Linear's forward. Decode-sized inputs (at most linear_gemv_max_rows rows of float32
    on the CPU) go to ssmkit's kernel, which reads the weight once for all rows, at the memory
    bandwidth; prefill and training sizes stay with torch's GEMM. A weight that needs a
    gradient must be float32 there (the kernel's backward reads f32)."""
    w = self.weight
    rows = input.numel() // input.shape[-1] if input.dim() else 0
    if (input.device.type == "cpu" and w.device.type == "cpu" and input.dtype == torch.float32
            and w.dtype in _LINEAR_WEIGHTS and 0 < rows <= _LINEAR_MAX_ROWS
            and (w.dtype == torch.float32 or not (torch.is_grad_enabled() and w.requires_grad))):
        return F.linear(input, w, self.bias)
    return torch.nn.functional.linear(input, w, self.bias)


# ------------------------------------------------------------------ accelerate


def accelerate(model):
    """Makes `model` (a transformers MambaForCausalLM, Mamba2ForCausalLM, their base models,
    or a hybrid reusing their mixers) run on ssmkit's kernels, in place; returns it. Raises
    ValueError when the model has no mixer this function knows."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"ssmkit.torch.accelerate: expected a torch.nn.Module, given "
                        f"{type(model).__name__}")
    norms = _norm_replacements()
    mixers = 0
    for module in model.modules():
        if _is_accelerated(module):
            mixers += _calls(type(module).forward, _SCANS)
            continue
        forward = type(module).forward
        if _calls(forward, _SCANS):
            mamba1 = _calls(forward, ("mamba_selective_scan",))
            _bind(module, _with_globals(forward, MAMBA1_KERNELS if mamba1 else KERNELS))
            mixers += 1
        elif hasattr(forward, "__code__") and _code_key(forward) in norms:
            _bind(module, norms[_code_key(forward)])
        elif type(module) is torch.nn.Linear:
            _bind(module, _linear)
    if mixers == 0:
        raise ValueError(f"ssmkit.torch.accelerate: {type(model).__name__} has no Mamba or "
                         f"Mamba-2 mixer calling transformers' mamba_selective_scan / "
                         f"mamba2_chunk_scan (the modeling code of transformers >= 5.15)")
    if hasattr(type(model), "generate"):  # greedy generate() whole in the engine
        model.generate = types.MethodType(engine_generate, model)
    return model
