"""The hybrid families' test fixtures, called by make_model_fixtures.py (which documents the
layout and how to run it).

Per family a tiny random checkpoint made by transformers itself (save_pretrained, f32) whose
config exercises the family's distinctive parts (layer lists mixing block kinds, GQA, rotary or
none, partial rotary, MoE with k > 1, shared experts, muP multipliers, shared blocks with
adapters), every parameter moved off its initial value at a realistic scale, and the logits
transformers computes for it: expected.safetensors as for the Mamba fixtures.

Where the published hub files spell a config differently from what save_pretrained writes, one
fixture keeps the hub spelling (config.json rewritten after saving): GraniteMoeHybrid's
layer_types "mamba" / "attention", Nemotron-H's hybrid_override_pattern.

Two tokenizer styles beside the GPT-NeoX one, trained here on the fixtures' corpus:
  tokenizer-split/  byte-level BPE whose pre-tokenizer is a Split by the Llama-3 / cl100k regex
                    then ByteLevel without its own regex (Granite-4.0, Bamba, Nemotron-H and
                    Falcon-H1 ship this form)
  tokenizer-spm/    SentencePiece-style BPE: "▁" for spaces (Prepend + Replace normalizers, the
                    older form Jamba ships), byte fallback to <0xNN> tokens, decoder Replace +
                    ByteFallback + Fuse + Strip
  tokenizer-spm-metaspace/  the same model with the Metaspace pre-tokenizer instead of the
                    normalizers (the form transformers 5 writes; Zamba2's fixture)
each with cases.json (encode and decode results of the `tokenizers` package).
"""

import copy
import json
import math
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
import transformers as T

# The Llama-3 / cl100k pre-tokenizer regex.
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_VOCAB = 304  # the split tokenizer's 300 entries, padded
SPM_VOCAB = 392    # 3 specials + 256 bytes + the trained pieces, padded


def split_tokenizer(corpus, out_dir: Path, cases_fn) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|end_of_text|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([corpus] * 4, trainer=trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    cases_fn(tok, out_dir)
    return tok


def spm_tokenizer(corpus, out_dir: Path, metaspace: bool, cases_fn) -> Tokenizer:
    """Trains the pieces with the normalizer form on the corpus's ASCII characters (every other
    character then takes the byte fallback), then inserts the 256 byte tokens after the specials
    (where Llama's and Mistral's vocabularies have them) and renumbers."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=130, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    ascii_corpus = "".join(c for c in corpus if ord(c) < 128)
    tok.train_from_iterator([ascii_corpus] * 4, trainer=trainer)
    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for piece, _ in trained[:3]:
        vocab[piece] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in trained[3:]:
        vocab.setdefault(piece, len(vocab))
    j["model"]["vocab"] = vocab
    if metaspace:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                              "split": False}
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    assert tok.get_vocab_size() <= SPM_VOCAB, tok.get_vocab_size()
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    cases_fn(tok, out_dir)
    return tok


def inverse_softplus_dt(n, generator, lo=1e-3, hi=1e-1):
    """dt_bias as Mamba initialises it: softplus^-1 of a log-uniform dt in [lo, hi]."""
    dt = torch.exp(torch.rand(n, generator=generator) * (math.log(hi) - math.log(lo)) + math.log(lo))
    return dt + torch.log(-torch.expm1(-dt))


def randomize_hybrid(model, seed, dt_lo=1e-3, fan_in_scaled=(), fan_in_gain=1.0):
    """Every parameter off its initial value at a realistic scale: norms 1 + 0.2 noise, D and
    A_log around their Mamba values, dt_bias from a log-uniform dt (transformers initialises
    some families' dt_bias to ones), biases 0.1 noise, matrices init + 0.02 noise, adapters
    0.02 noise. Matrices whose name contains one of `fan_in_scaled` get fan_in_gain * noise /
    sqrt(fan-in) instead: at a width of 32 a matrix of std 0.028 (init + noise) shrinks what it
    multiplies sixfold (at 4096 it does not), and a chain of them (latent projection, expert, relu2, expert,
    projection) would leave a block too small for the logits to show whether it is computed
    right. The noise drawn is the same either way, so the other parameters do not change."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("A_log"):
                base = torch.log(torch.arange(1, p.shape[-1] + 1, dtype=torch.float32))
                p.copy_(base.expand_as(p) + 0.1 * noise)
            elif name.endswith("dt_bias"):
                p.copy_(inverse_softplus_dt(p.numel(), g, lo=dt_lo).view(p.shape))
            elif name.endswith("dt_proj.bias"):
                p.copy_(inverse_softplus_dt(p.numel(), g, lo=dt_lo).view(p.shape))
            elif "norm" in name or name.endswith(".D"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif p.dim() >= 2 and any(s in name for s in fan_in_scaled):
                p.copy_(fan_in_gain * noise / math.sqrt(p.shape[-1]))
            elif name.endswith("mixer.gate.weight"):
                # Nemotron-H's router: logits of order 1, so the sigmoids spread over (0, 1)
                # and the routing depends on them as much as on the correction bias.
                p.copy_(p + 0.2 * noise)
            else:
                p.copy_(p + 0.02 * noise)
        # Buffers that hold learned values (after the parameters: the families without them
        # draw the same numbers as before).
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def granite(ctx):
    # MoE with a shared expert, rope, GQA, every multiplier; the hub spelling of layer_types.
    cfg = T.GraniteMoeHybridConfig(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        shared_intermediate_size=40, layer_types=["mamba", "attention", "mamba", "attention"],
        position_embedding_type="rope", rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        mamba_n_heads=4, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=8, embedding_multiplier=12.0, residual_multiplier=0.22,
        attention_multiplier=0.125, logits_scaling=2.5, rms_norm_eps=1e-5, pad_token_id=1,
        bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    ctx.make("granitemoehybrid-moe", T.GraniteMoeHybridForCausalLM, cfg, "split", 21,
             config_edit=lambda c: c.update(layer_types=["mamba", "attention", "mamba", "attention"]))
    # Dense (the shared MLP alone), no position embedding, tied embeddings; the layer types as
    # transformers 5 writes them, position_embedding_type as the hub files do ("nope").
    cfg = T.GraniteMoeHybridConfig(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, num_local_experts=0,
        shared_intermediate_size=48, layer_types=["mamba", "mamba", "attention"],
        position_embedding_type=None, mamba_n_heads=8, mamba_n_groups=1, mamba_d_state=16,
        mamba_chunk_size=8, embedding_multiplier=8.0, residual_multiplier=0.3,
        attention_multiplier=0.2, logits_scaling=1.5, pad_token_id=1, bos_token_id=0,
        eos_token_id=0, tie_word_embeddings=True)
    ctx.make("granitemoehybrid-dense", T.GraniteMoeHybridForCausalLM, cfg, "split", 22,
             config_edit=lambda c: c.update(position_embedding_type="nope"))


def bamba(ctx):
    cfg = T.BambaConfig(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1],
        mamba_n_heads=4, mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=8,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0}, mlp_bias=True,
        pad_token_id=1, bos_token_id=0, eos_token_id=0)
    ctx.make("bamba", T.BambaForCausalLM, cfg, "split", 23)


def nemotron_h(ctx):
    # M / * / - layers, written as the hub files' hybrid_override_pattern.
    cfg = T.NemotronHConfig(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=64,
        hybrid_override_pattern="M*-M-", num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, mamba_num_heads=6, mamba_head_dim=8, ssm_state_size=16, n_groups=2,
        chunk_size=8, mlp_bias=False, use_bias=True, pad_token_id=1, bos_token_id=0,
        eos_token_id=0)

    def hub_spelling(c):
        c["hybrid_override_pattern"] = "M*-M-"
        del c["layers_block_type"]
    ctx.make("nemotron_h", T.NemotronHForCausalLM, cfg, "split", 24, config_edit=hub_spelling,
             dt_lo=5e-3)
    # Nemotron 3's MoE layers among M / * / -: 8 ungated relu2 experts in 4 groups of which 2
    # are kept, top-3, renormalised, scaled by 2.5, a shared expert, MLP biases.
    cfg = T.NemotronHConfig(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=48,
        hybrid_override_pattern="ME*E-M", num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, mamba_num_heads=4, mamba_head_dim=8, ssm_state_size=16, n_groups=2,
        chunk_size=8, mlp_bias=True, use_bias=False, n_routed_experts=8, num_experts_per_tok=3,
        moe_intermediate_size=24, moe_shared_expert_intermediate_size=40, n_group=4,
        topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, pad_token_id=1,
        bos_token_id=0, eos_token_id=0)

    def hub_moe_spelling(c):
        c["hybrid_override_pattern"] = "ME*E-M"
        del c["layers_block_type"]
    # Seed 31: with 29 the raw argmax of a decode step was eos, which transformers' generate
    # (min_new_tokens) bans and the engine's generate stops at, so the recorded greedy
    # continuation was not one the engine can give from text.
    ctx.make("nemotron_h-moe", T.NemotronHForCausalLM, cfg, "split", 31,
             config_edit=hub_moe_spelling, dt_lo=5e-3)
    # Nemotron 3 Super's latent MoE (moe_latent_size): the 12 routed experts at width 16 between
    # fc1_latent_proj / fc2_latent_proj (biased: mlp_bias), the router and the shared expert at
    # the hidden width 32; 4 groups of 3 of which 2 kept, top-4, renormalised, scaled by 2; the
    # layer list as transformers 5 writes it. The routed path's matrices at 0.35 / sqrt(fan-in)
    # (randomize_hybrid): the logits move 0.3% when fc1_latent_proj is scaled by 1.1, far above
    # the tests' 1e-4, while a top-k or group choice that a q8_0 file's 8-bit activations flip
    # (this router has near ties: 12 experts in 4 groups) moves one position's logits by less
    # than that file's 4% tolerance (at 0.5 / sqrt(fan-in) one such flip moved them 11%).
    cfg = T.NemotronHConfig(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=40,
        layers_block_type=["mamba", "moe", "mamba", "attention", "moe", "mlp"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, mamba_num_heads=4,
        mamba_head_dim=8, ssm_state_size=16, n_groups=2, chunk_size=8, mlp_bias=True,
        use_bias=False, n_routed_experts=12, num_experts_per_tok=4, moe_intermediate_size=24,
        moe_shared_expert_intermediate_size=48, moe_latent_size=16, n_group=4, topk_group=2,
        norm_topk_prob=True, routed_scaling_factor=2.0, pad_token_id=1, bos_token_id=0,
        eos_token_id=0)
    ctx.make("nemotron_h-moe-latent", T.NemotronHForCausalLM, cfg, "split", 32, dt_lo=5e-3,
             fan_in_scaled=("mixer.experts.", "latent_proj."), fan_in_gain=0.35)


def falcon_h1(ctx):
    # Every muP multiplier at the scale of the published configs; d_ssm != expand * hidden.
    common = dict(
        vocab_size=SPLIT_VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=48, mamba_n_heads=6,
        mamba_n_groups=1, mamba_d_state=16, mamba_chunk_size=8,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        embedding_multiplier=5.66, lm_head_multiplier=0.039, attention_in_multiplier=1.1,
        attention_out_multiplier=0.94, key_multiplier=0.39, ssm_in_multiplier=1.25,
        ssm_out_multiplier=0.24, mlp_multipliers=[0.88, 0.59],
        ssm_multipliers=[0.35, 0.25, 0.35, 0.5, 0.35], pad_token_id=1, bos_token_id=0,
        eos_token_id=0)
    ctx.make("falcon_h1", T.FalconH1ForCausalLM, T.FalconH1Config(**common), "split", 25)
    # The gated RMSNorm (gate after the norm) and projection biases.
    cfg = T.FalconH1Config(**common, mamba_rms_norm=True, mamba_norm_before_gate=True,
                           projectors_bias=True, mamba_proj_bias=True, attention_bias=True)
    ctx.make("falcon_h1-norm", T.FalconH1ForCausalLM, cfg, "split", 26)


def jamba(ctx):
    cfg = T.JambaConfig(
        vocab_size=SPM_VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
        attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=0,
        mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    ctx.make("jamba", T.JambaForCausalLM, cfg, "spm", 27)


def zamba2(ctx):
    cfg = T.Zamba2Config(
        vocab_size=SPM_VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=5,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"], num_attention_heads=4,
        n_mamba_heads=4, mamba_d_state=16, mamba_ngroups=2, chunk_size=8, num_mem_blocks=2,
        use_shared_attention_adapter=True, adapter_rank=4, use_mem_rope=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    ctx.make("zamba2", T.Zamba2ForCausalLM, cfg, "spm-metaspace", 28, dt_lo=5e-3)


FAMILIES = [granite, bamba, nemotron_h, falcon_h1, jamba, zamba2]


class Context:
    """What the family functions need from the main script."""

    def __init__(self, root: Path, tokenizers: dict, save_hf, record):
        self.root = root
        self.tokenizers = tokenizers  # style -> (directory, Tokenizer)
        self.save_hf = save_hf
        self.record = record
        self.prompts = {}

    def make(self, name, cls, cfg, tokenizer, seed, config_edit=None, dt_lo=1e-3,
             fan_in_scaled=(), fan_in_gain=1.0):
        torch.manual_seed(seed)
        model = cls(cfg).float()
        randomize_hybrid(model, seed + 100, dt_lo=dt_lo, fan_in_scaled=fan_in_scaled,
                         fan_in_gain=fan_in_gain)
        tok_dir, tok = self.tokenizers[tokenizer]
        prompts = {k: tok.encode(v).ids for k, v in self.prompt_texts.items()}
        out = self.root / "models" / name
        self.save_hf(model, out, tok_dir)
        if config_edit is not None:
            path = out / "config.json"
            c = json.loads(path.read_text())
            config_edit(c)
            path.write_text(json.dumps(c, indent=2) + "\n")
            # The edited file must still load as the same model in transformers.
            reloaded = cls.from_pretrained(str(out)).float()
            x = torch.tensor([prompts["p2"]])
            with torch.no_grad():
                assert torch.equal(reloaded(x).logits, model(x).logits), f"{name}: config edit"
        self.record(copy.deepcopy(model), prompts, out / "expected.safetensors")
        size = sum(f.stat().st_size for f in out.iterdir())
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, "
              f"{size / 1e3:.0f} kB")
        assert size < 1_000_000, f"{name}: fixture too large"


def make_all(root: Path, corpus: str, cases_fn, save_hf, record, prompt_texts: dict,
             only=None):
    toks = {
        "split": split_tokenizer(corpus, root / "tokenizer-split", cases_fn),
        "spm": spm_tokenizer(corpus, root / "tokenizer-spm", False, cases_fn),
        "spm-metaspace": spm_tokenizer(corpus, root / "tokenizer-spm-metaspace", True, cases_fn),
    }
    ctx = Context(root, {k: (root / ("tokenizer-" + k), v) for k, v in toks.items()}, save_hf,
                  record)
    ctx.prompt_texts = prompt_texts
    for family in FAMILIES:
        if only is None or family.__name__ == only:
            family(ctx)
