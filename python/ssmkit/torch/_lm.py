"""mamba_ssm's language model (models/mixer_seq_simple.py, modules/block.py, modules/mlp.py)
on ssmkit's kernels: MambaConfig, Block, GatedMLP, MixerModel and MambaLMHeadModel with its
constructor arguments and parameter names, so state-spaces checkpoints load unchanged
(from_pretrained on a local directory), and its allocate_inference_cache / step / generate
decode path. Attention layers (attn_layer_idx) are not supported.
"""
import dataclasses
import json
import math
import os
from collections import namedtuple
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from ._generation import GenerationMixin
from ._mamba import Mamba
from ._mamba2 import Mamba2
from ._norm import RMSNorm


@dataclasses.dataclass
class MambaConfig:
    d_model: int = 2560
    d_intermediate: int = 0
    n_layer: int = 64
    vocab_size: int = 50277
    ssm_cfg: dict = dataclasses.field(default_factory=dict)
    attn_layer_idx: list = dataclasses.field(default_factory=list)
    attn_cfg: dict = dataclasses.field(default_factory=dict)
    rms_norm: bool = True
    residual_in_fp32: bool = True
    fused_add_norm: bool = True
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True


class GatedMLP(nn.Module):
    """fc2(y * activation(gate)), (y, gate) = fc1(x) split in two; the hidden width rounded up
    to multiple_of."""

    def __init__(self, in_features, hidden_features=None, out_features=None, activation=F.silu,
                 bias=False, multiple_of=128, device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        out_features = in_features if out_features is None else out_features
        hidden = int(8 * in_features / 3) if hidden_features is None else hidden_features
        hidden = (hidden + multiple_of - 1) // multiple_of * multiple_of
        self.fc1 = nn.Linear(in_features, 2 * hidden, bias=bias, **factory)
        self.activation = activation
        self.fc2 = nn.Linear(hidden, out_features, bias=bias, **factory)

    def forward(self, x):
        y, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(y * self.activation(gate))


def _add_norm(norm, hidden_states, residual, fused, residual_in_fp32):
    """residual = hidden_states + residual; (norm(residual), residual): fused (one kernel, the
    residual accumulated in f32) for an RMSNorm, in plain torch otherwise."""
    if fused and isinstance(norm, RMSNorm):
        return norm(hidden_states, residual=residual, prenorm=True,
                    residual_in_fp32=residual_in_fp32)
    residual = hidden_states if residual is None else hidden_states + residual
    hidden_states = norm(residual.to(dtype=norm.weight.dtype))
    return hidden_states, residual.to(torch.float32) if residual_in_fp32 else residual


class Block(nn.Module):
    """mamba_ssm's Block: Add -> Norm -> Mixer (-> Add -> Norm -> MLP), returning
    (hidden_states, residual)."""

    def __init__(self, dim, mixer_cls, mlp_cls, norm_cls=nn.LayerNorm, fused_add_norm=False,
                 residual_in_fp32=False):
        super().__init__()
        self.residual_in_fp32 = residual_in_fp32
        self.fused_add_norm = fused_add_norm
        self.norm = norm_cls(dim)
        self.mixer = mixer_cls(dim)
        if mlp_cls is not nn.Identity:
            self.norm2 = norm_cls(dim)
            self.mlp = mlp_cls(dim)
        else:
            self.mlp = None

    def forward(self, hidden_states, residual=None, inference_params=None, **mixer_kwargs):
        hidden_states, residual = _add_norm(self.norm, hidden_states, residual,
                                            self.fused_add_norm, self.residual_in_fp32)
        hidden_states = self.mixer(hidden_states, inference_params=inference_params,
                                   **mixer_kwargs)
        if self.mlp is not None:
            hidden_states, residual = _add_norm(self.norm2, hidden_states, residual,
                                                self.fused_add_norm, self.residual_in_fp32)
            hidden_states = self.mlp(hidden_states)
        return hidden_states, residual

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        return self.mixer.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)


_MIXERS = {"Mamba1": Mamba, "Mamba2": Mamba2}


def create_block(d_model, d_intermediate, ssm_cfg=None, attn_layer_idx=None, attn_cfg=None,
                 norm_epsilon=1e-5, rms_norm=False, residual_in_fp32=False,
                 fused_add_norm=False, layer_idx=None, device=None, dtype=None):
    factory = {"device": device, "dtype": dtype}
    if attn_layer_idx and layer_idx in attn_layer_idx:
        raise NotImplementedError("MambaLMHeadModel: attention layers (attn_layer_idx) are not "
                                  "supported by ssmkit.torch")
    ssm_cfg = dict(ssm_cfg or {})
    layer = ssm_cfg.pop("layer", "Mamba1")
    if layer not in _MIXERS:
        raise ValueError(f"ssm_cfg layer={layer!r}: expected one of {sorted(_MIXERS)}")
    mixer_cls = partial(_MIXERS[layer], layer_idx=layer_idx, **ssm_cfg, **factory)
    norm_cls = partial(RMSNorm if rms_norm else nn.LayerNorm, eps=norm_epsilon, **factory)
    mlp_cls = (nn.Identity if d_intermediate == 0 else
               partial(GatedMLP, hidden_features=d_intermediate, out_features=d_model,
                       **factory))
    block = Block(d_model, mixer_cls, mlp_cls, norm_cls=norm_cls, fused_add_norm=fused_add_norm,
                  residual_in_fp32=residual_in_fp32)
    block.layer_idx = layer_idx
    return block


def _init_weights(module, n_layer, initializer_range=0.02, rescale_prenorm_residual=True,
                  n_residuals_per_layer=1):
    """mamba_ssm's initialisation (GPT-2's scheme): zero biases except dt_proj's, normal
    embeddings, out_proj / fc2 rescaled by 1/sqrt(residuals per layer * n_layer)."""
    if isinstance(module, nn.Linear):
        if module.bias is not None and not getattr(module.bias, "_no_reinit", False):
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=initializer_range)
    if rescale_prenorm_residual:
        for name, p in module.named_parameters():
            if name in ("out_proj.weight", "fc2.weight"):
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                with torch.no_grad():
                    p /= math.sqrt(n_residuals_per_layer * n_layer)


class MixerModel(nn.Module):
    def __init__(self, d_model, n_layer, d_intermediate, vocab_size, ssm_cfg=None,
                 attn_layer_idx=None, attn_cfg=None, norm_epsilon=1e-5, rms_norm=False,
                 initializer_cfg=None, fused_add_norm=False, residual_in_fp32=False,
                 device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.residual_in_fp32 = residual_in_fp32
        self.fused_add_norm = fused_add_norm
        self.embedding = nn.Embedding(vocab_size, d_model, **factory)
        self.layers = nn.ModuleList([
            create_block(d_model, d_intermediate, ssm_cfg=ssm_cfg, attn_layer_idx=attn_layer_idx,
                         attn_cfg=attn_cfg, norm_epsilon=norm_epsilon, rms_norm=rms_norm,
                         residual_in_fp32=residual_in_fp32, fused_add_norm=fused_add_norm,
                         layer_idx=i, **factory)
            for i in range(n_layer)])
        self.norm_f = (RMSNorm if rms_norm else nn.LayerNorm)(d_model, eps=norm_epsilon,
                                                              **factory)
        self.apply(partial(_init_weights, n_layer=n_layer, **(initializer_cfg or {}),
                           n_residuals_per_layer=1 if d_intermediate == 0 else 2))

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        return {i: layer.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)
                for i, layer in enumerate(self.layers)}

    def forward(self, input_ids, inference_params=None, **mixer_kwargs):
        hidden_states, residual = self.embedding(input_ids), None
        for layer in self.layers:
            hidden_states, residual = layer(hidden_states, residual,
                                            inference_params=inference_params, **mixer_kwargs)
        return _add_norm(self.norm_f, hidden_states, residual, self.fused_add_norm,
                         self.residual_in_fp32)[0]


class MambaLMHeadModel(nn.Module, GenerationMixin):
    def __init__(self, config, initializer_cfg=None, device=None, dtype=None):
        super().__init__()
        self.config = config
        vocab_size = config.vocab_size
        if vocab_size % config.pad_vocab_size_multiple:
            vocab_size += config.pad_vocab_size_multiple - vocab_size % config.pad_vocab_size_multiple
        factory = {"device": device, "dtype": dtype}
        self.backbone = MixerModel(
            d_model=config.d_model, n_layer=config.n_layer, d_intermediate=config.d_intermediate,
            vocab_size=vocab_size, ssm_cfg=config.ssm_cfg, attn_layer_idx=config.attn_layer_idx,
            attn_cfg=config.attn_cfg, rms_norm=config.rms_norm, initializer_cfg=initializer_cfg,
            fused_add_norm=config.fused_add_norm, residual_in_fp32=config.residual_in_fp32,
            **factory)
        self.lm_head = nn.Linear(config.d_model, vocab_size, bias=False, **factory)
        self.apply(partial(_init_weights, n_layer=config.n_layer, **(initializer_cfg or {})))
        self.tie_weights()

    def tie_weights(self):
        if self.config.tie_embeddings:
            self.lm_head.weight = self.backbone.embedding.weight

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        return self.backbone.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype,
                                                      **kwargs)

    def forward(self, input_ids, position_ids=None, inference_params=None, num_last_tokens=0,
                **mixer_kwargs):
        """Logits (B, L, V) in a namedtuple CausalLMOutput(logits); only the last
        num_last_tokens positions when > 0. position_ids is accepted and unused."""
        hidden_states = self.backbone(input_ids, inference_params=inference_params,
                                      **mixer_kwargs)
        if num_last_tokens > 0:
            hidden_states = hidden_states[:, -num_last_tokens:]
        return CausalLMOutput(logits=self.lm_head(hidden_states))

    @classmethod
    def from_pretrained(cls, pretrained_model_name, device=None, dtype=None, **kwargs):
        """A state-spaces checkpoint in a local directory: config.json and
        pytorch_model.bin (or model.safetensors). Nothing is downloaded."""
        directory = os.fspath(pretrained_model_name)
        with open(os.path.join(directory, "config.json")) as f:
            config = MambaConfig(**json.load(f))
        model = cls(config, device=device, dtype=dtype, **kwargs)
        state_dict = load_state_dict(directory)
        model.load_state_dict({k: v.to(device=device, dtype=dtype if v.is_floating_point()
                                       and dtype is not None else v.dtype)
                               for k, v in state_dict.items()})
        return model

    def save_pretrained(self, save_directory):
        """config.json and pytorch_model.bin, as mamba_ssm writes them."""
        os.makedirs(save_directory, exist_ok=True)
        torch.save(self.state_dict(), os.path.join(save_directory, "pytorch_model.bin"))
        with open(os.path.join(save_directory, "config.json"), "w") as f:
            json.dump(dataclasses.asdict(self.config), f, indent=4)


CausalLMOutput = namedtuple("CausalLMOutput", ["logits"])


def load_state_dict(directory):
    """The state dict of a state-spaces checkpoint directory: pytorch_model.bin (torch.load,
    tensors only) or model.safetensors (needs the safetensors package)."""
    bin_path = os.path.join(directory, "pytorch_model.bin")
    st_path = os.path.join(directory, "model.safetensors")
    if os.path.exists(bin_path):
        return torch.load(bin_path, map_location="cpu", weights_only=True)
    if os.path.exists(st_path):
        from safetensors.torch import load_file
        return load_file(st_path)
    raise FileNotFoundError(f"{directory}: expected pytorch_model.bin or model.safetensors")
