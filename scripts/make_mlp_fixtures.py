"""Records transformers' feed-forward blocks of the hybrid models for tests/mlp_parity_test.cpp.

Each block is built from its transformers class with a small config, every parameter randomised
(normal, std 1/sqrt(fan_in); biases 0.1), and run in f32 on CPU: the input x, the output, the
router logits of the MoE blocks, and, for a random output gradient (and a random gradient on the
router logits, as an auxiliary loss would give), torch's gradients of x and of every parameter.
Written to tests/fixtures/mlp/<block>.safetensors under the modules' own parameter names plus
"x", "out", "router_logits", "dout", "drouter_logits" and "grad.<name>".

Run with the venv of scripts/fixtures_venv.sh (torch, transformers 5.x, safetensors):
  build/venv/bin/python scripts/make_mlp_fixtures.py
The tests read the committed files; they do not need torch.
"""

import os

import torch
from safetensors.torch import save_file
from transformers import FalconH1Config, GraniteMoeHybridConfig, JambaConfig, NemotronHConfig, Zamba2Config
from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1MLP
from transformers.models.granitemoehybrid.modeling_granitemoehybrid import (
    GraniteMoeHybridMLP,
    GraniteMoeHybridMoE,
)
from transformers.models.jamba.modeling_jamba import JambaSparseMoeBlock
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMLP
from transformers.models.zamba2.modeling_zamba2 import Zamba2MLP

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "mlp")
T, D = 6, 32


def randomise(module, generator):
    for name, p in module.named_parameters():
        fan_in = p.shape[-1]
        std = 0.1 if p.dim() == 1 else fan_in ** -0.5
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=generator) * std)


def record(name, module, forward, router=None, seed=0):
    """forward(x) -> out; router(x) -> logits (MoE only)."""
    g = torch.Generator().manual_seed(seed)
    randomise(module, g)
    x = torch.randn(1, T, D, generator=g, requires_grad=True)
    out = forward(x)
    dout = torch.randn(out.shape, generator=g)
    loss = (out * dout).sum()
    tensors = {}
    if router is not None:
        logits = router(x.reshape(T, D))
        dlogits = torch.randn(logits.shape, generator=g) * 0.1
        loss = loss + (logits * dlogits).sum()
        tensors["router_logits"] = logits.detach()
        tensors["drouter_logits"] = dlogits
    loss.backward()
    tensors["x"] = x.detach().reshape(T, D)
    tensors["out"] = out.detach().reshape(T, D)
    tensors["dout"] = dout.reshape(T, D)
    tensors["grad.x"] = x.grad.reshape(T, D)
    for pname, p in module.named_parameters():
        if p.grad is None:  # a part the output does not use (Zamba2's other blocks' adapters)
            continue
        tensors[pname] = p.detach()
        tensors["grad." + pname] = p.grad
    tensors = {k: v.contiguous().float() for k, v in tensors.items()}
    save_file(tensors, os.path.join(OUT, name + ".safetensors"))
    print(name, sorted(k for k in tensors if not k.startswith("grad.")))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_grad_enabled(True)

    # GraniteMoeHybrid: 8 experts of 16, top-3 (top-k, then softmax), shared_mlp of 24.
    cfg = GraniteMoeHybridConfig(hidden_size=D, intermediate_size=16, shared_intermediate_size=24,
                                 num_local_experts=8, num_experts_per_tok=3, hidden_act="silu",
                                 mamba_n_heads=4, num_attention_heads=4, num_key_value_heads=2)
    block = torch.nn.Module()
    block.block_sparse_moe = GraniteMoeHybridMoE(cfg)
    block.shared_mlp = GraniteMoeHybridMLP(cfg)
    record("granitemoehybrid_moe", block,
           lambda x: block.block_sparse_moe(x) + block.shared_mlp(x),
           router=lambda h: block.block_sparse_moe.router(h)[0], seed=1)

    # Jamba: 8 experts of 24, top-2 of the softmax, not renormalised.
    cfg = JambaConfig(hidden_size=D, intermediate_size=24, num_experts=8, num_experts_per_tok=2,
                      hidden_act="silu")
    block = JambaSparseMoeBlock(cfg)
    record("jamba_moe", block, block, router=lambda h: block.router(h)[0], seed=2)

    # Falcon-H1: gated silu with mlp_multipliers and biases.
    cfg = FalconH1Config(hidden_size=D, intermediate_size=48, mlp_multipliers=[0.8125, 0.5625],
                         mlp_bias=True, hidden_act="silu", mamba_n_heads=4, mamba_d_head=16, mamba_d_ssm=64,
                         num_attention_heads=4, num_key_value_heads=2)
    block = FalconH1MLP(cfg)
    record("falcon_h1_mlp", block, block, seed=3)

    # Nemotron-H: ungated relu2 with biases.
    cfg = NemotronHConfig(hidden_size=D, intermediate_size=80, mlp_hidden_act="relu2",
                          mlp_bias=True)
    block = NemotronHMLP(cfg)
    record("nemotron_h_mlp", block, block, seed=4)

    # Zamba2: gelu, fused gate_up_proj with bias, the second hybrid layer's LoRA adapter.
    cfg = Zamba2Config(hidden_size=D, intermediate_size=48, num_hidden_layers=2,
                       layers_block_type=["hybrid", "hybrid"], num_attention_heads=4,
                       adapter_rank=4, num_mem_blocks=1, add_bias_linear=True, hidden_act="gelu")
    block = Zamba2MLP(cfg, num_fwd_mem_blocks=2, block_id=0)
    record("zamba2_mlp", block, lambda x: block(x, layer_idx=1), seed=5)


if __name__ == "__main__":
    main()
