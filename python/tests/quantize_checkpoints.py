"""What the `ssmkit quantize` tests share (test_gguf.py, test_quantize_hybrid.py): the CLI, and
checkpoints whose matrices all have rows of whole K-quant blocks (d_model 256, every width a
multiple of 256), so that each type is written as itself, none falling back as the tiny
fixtures' matrices do. Made here with transformers at its own initialisation, then moved off it
(the Mamba ones as test_gguf.py measured its bounds on, the hybrids by the fixtures'
randomize_hybrid), saved with save_pretrained with a fixture's tokenizer.json."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
CLI = os.path.join(ROOT, "build", "release", "ssmkit")

WIDE = ["mamba", "mamba2", "granitemoehybrid-moe", "granitemoehybrid-dense", "bamba",
        "falcon_h1", "nemotron_h", "nemotron_h-moe", "jamba"]
# Deeper versions of each (make_wide's `deep`) for llama-quantize's K-quant mixes
# (test_quantize_mixes.py), whose choice depends on a tensor's place among the layers: 8 layers
# (attention in layers 2 and 5 of the Granite and Bamba ones, in every Falcon-H1 layer),
# Nemotron-H's 16 (NEMOTRON_H_DEEP_PATTERN).
JAMBA_SEED = 7
DEEP_LAYERS = 8
DEEP_ATTENTION = [2, 5]
# Attention in layers 3 and 9, MLPs in 1, 5, 7, 11, 13 and 15.
NEMOTRON_H_DEEP_PATTERN = "M-M*M-M-M*M-M-M-"


def run_quantize(source, out, qtype):
    """`ssmkit quantize --type QTYPE SOURCE OUT`; returns its report line."""
    result = subprocess.run([CLI, "quantize", "--type", qtype, source, out],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _mamba(arch, layers):
    import torch
    from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM
    torch.manual_seed(7)
    if arch == "mamba":
        config = MambaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, state_size=16,
                             num_hidden_layers=layers, time_step_rank=16, use_bias=False,
                             bos_token_id=0, eos_token_id=0, pad_token_id=1)
        model = MambaForCausalLM(config)
    else:
        config = Mamba2Config(vocab_size=512, hidden_size=256, expand=2, head_dim=32, num_heads=16,
                              n_groups=2, state_size=32, num_hidden_layers=layers, chunk_size=16,
                              tie_word_embeddings=False, bos_token_id=0, eos_token_id=0,
                              pad_token_id=1)
        model = Mamba2ForCausalLM(config)
    with torch.no_grad():  # A_log and D away from their initial constants, as after training
        for name, p in model.named_parameters():
            if name.endswith(("A_log", ".D", "norm.weight", "dt_bias")):
                p.add_(0.3 * torch.randn_like(p))
    return model


def _hybrid(family, deep):
    """The hybrid families at d_model 256: D = 512 (16 heads of 32), attention 4 heads of 64 (2
    key-value heads), MLP and expert widths 256 / 512; each family's features as its published
    models have them (no rope but for Bamba, Granite's multipliers, Falcon-H1's muP multipliers
    and gated norm, the dense Granite's tied head, Nemotron 3's grouped sigmoid routing and
    shared expert, Jamba's experts on every other layer), and a tied Falcon-H1, whose head the
    converter cannot write (`deep`: an untied one, as DEEP_LAYERS deep as the others; `deep`
    changes the Granite, Bamba, Falcon-H1 and dense Nemotron-H ones). Nemotron-H MoE without
    "-" layers and biases, Jamba without projection biases: llama.cpp loads neither
    (test_llama_cpp_runs_the_file). Jamba's dt_rank is 256, as the published ones' (hidden /
    16), so that dt_proj's rows are whole blocks."""
    import transformers as T
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from hybrid_fixtures import randomize_hybrid
    mamba = dict(mamba_n_heads=16, mamba_d_head=32, mamba_n_groups=2, mamba_d_state=32,
                 mamba_chunk_size=16)
    common = dict(vocab_size=512, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                  pad_token_id=1, bos_token_id=0, eos_token_id=0)
    granite = dict(common, **mamba, embedding_multiplier=12.0, residual_multiplier=0.22,
                   attention_multiplier=0.015625, logits_scaling=3.0,
                   position_embedding_type="nope", layer_types=["mamba", "attention", "mamba"],
                   num_hidden_layers=3)
    if deep:
        granite.update(num_hidden_layers=DEEP_LAYERS, layer_types=[
            "attention" if i in DEEP_ATTENTION else "mamba" for i in range(DEEP_LAYERS)])
    if family == "granitemoehybrid-moe":
        model = T.GraniteMoeHybridForCausalLM(T.GraniteMoeHybridConfig(
            **granite, num_local_experts=4, num_experts_per_tok=2, intermediate_size=256,
            shared_intermediate_size=512, tie_word_embeddings=False))
    elif family == "granitemoehybrid-dense":
        model = T.GraniteMoeHybridForCausalLM(T.GraniteMoeHybridConfig(
            **granite, num_local_experts=0, num_experts_per_tok=0, intermediate_size=256,
            shared_intermediate_size=512, tie_word_embeddings=True))
    elif family == "bamba":
        model = T.BambaForCausalLM(T.BambaConfig(
            **common, **mamba, intermediate_size=512,
            num_hidden_layers=DEEP_LAYERS if deep else 3,
            attn_layer_indices=DEEP_ATTENTION if deep else [1], tie_word_embeddings=False))
    elif family == "falcon_h1":
        model = T.FalconH1ForCausalLM(T.FalconH1Config(
            **common, intermediate_size=512, num_hidden_layers=DEEP_LAYERS if deep else 2,
            head_dim=64,
            mamba_d_ssm=512, mamba_n_heads=16, mamba_d_head=32, mamba_n_groups=1,
            mamba_d_state=32, mamba_chunk_size=16, mamba_rms_norm=True,
            mamba_norm_before_gate=False, embedding_multiplier=5.66, lm_head_multiplier=0.039,
            attention_in_multiplier=1.1, attention_out_multiplier=0.94, key_multiplier=0.39,
            ssm_in_multiplier=1.25, ssm_out_multiplier=0.24, mlp_multipliers=[0.88, 0.59],
            ssm_multipliers=[0.35, 0.25, 0.35, 0.5, 0.35], tie_word_embeddings=not deep))
    elif family == "nemotron_h":
        model = T.NemotronHForCausalLM(T.NemotronHConfig(
            **common, intermediate_size=512,
            hybrid_override_pattern=NEMOTRON_H_DEEP_PATTERN if deep else "M*-M-", head_dim=64,
            mamba_num_heads=16, mamba_head_dim=32, ssm_state_size=32, n_groups=2, chunk_size=16,
            mlp_bias=False, use_bias=False, tie_word_embeddings=False))
    elif family == "nemotron_h-moe":
        # The routing picks 3 of 8 experts by scores that on some draws tie within the 8-bit
        # rounding of the activations the quantized products make (then one position of the
        # engine's logits on a q4_k file is off transformers' by ~0.2-0.5): the draw is fixed,
        # one with no such tie at the test's prompt in q8_0, q4_k and q6_k (measured 1.6e-2,
        # 2.6e-2, 2.6e-2; on 3 of 6 other seeds the q4_k error is 5e-2 to 0.15).
        import torch
        torch.manual_seed(7)
        model = T.NemotronHForCausalLM(T.NemotronHConfig(
            **common, intermediate_size=512, hybrid_override_pattern="ME*EM", head_dim=64,
            mamba_num_heads=16, mamba_head_dim=32, ssm_state_size=32, n_groups=2, chunk_size=16,
            mlp_bias=False, use_bias=False, n_routed_experts=8, num_experts_per_tok=3,
            moe_intermediate_size=256, moe_shared_expert_intermediate_size=512, n_group=4,
            topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
            tie_word_embeddings=False))
    else:
        # A fixed draw, as Nemotron-H MoE's: on a draw left to whatever ran before in the
        # process, a routing near-tie within the activations' 8-bit rounding once put the q8_0
        # file's logits 5.2e-2 off transformers' (bar 4e-2); this one passes in q8_0, q4_k and
        # q6_k, and under llama.cpp.
        import torch
        torch.manual_seed(JAMBA_SEED)
        model = T.JambaForCausalLM(T.JambaConfig(
            **dict(common, pad_token_id=0, bos_token_id=1, eos_token_id=2), intermediate_size=512,
            num_hidden_layers=4, num_experts=4, num_experts_per_tok=2, attn_layer_period=2,
            attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=0, mamba_d_state=16,
            mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=256, use_mamba_kernels=False,
            tie_word_embeddings=False))
    randomize_hybrid(model.float(), seed=31)
    return model


def make_wide(family, directory, deep=False):
    """Saves the `family` checkpoint (one of WIDE), or its deep version, into `directory`;
    returns it."""
    if family in ("mamba", "mamba2"):
        model = _mamba(family, DEEP_LAYERS if deep else 2)
    else:
        model = _hybrid(family, deep)
    model.save_pretrained(directory)
    if family == "nemotron_h":  # the pattern as the hub files spell it (the converter reads it)
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            config = json.load(f)
        config["hybrid_override_pattern"] = model.config.hybrid_override_pattern
        del config["layers_block_type"]
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
    # Jamba's converter writes a SentencePiece-style tokenizer, the others a byte-level BPE.
    tokenizer = ("mamba1-hf" if family in ("mamba", "mamba2") else
                 "jamba" if family == "jamba" else "bamba")
    shutil.copy(os.path.join(MODELS, tokenizer, "tokenizer.json"), directory)
    return str(directory)
