"""mamba_ssm's decoding (utils/generation.py) for MambaLMHeadModel: InferenceParams (the
per-layer decode states, keyed by layer_idx) and generate(): a prefill of the prompt, then
one step per token through each layer's step() (the decode kernels), greedy or sampled with
top-k / top-p / min-p / temperature. CUDA graphs (cg=True) are not supported.
"""
import dataclasses
from typing import Optional

import torch


@dataclasses.dataclass
class InferenceParams:
    max_seqlen: int
    max_batch_size: int
    seqlen_offset: int = 0
    batch_size_offset: int = 0
    key_value_memory_dict: dict = dataclasses.field(default_factory=dict)
    lengths_per_sample: Optional[torch.Tensor] = None

    def reset(self, max_seqlen, max_batch_size):
        self.max_seqlen, self.max_batch_size, self.seqlen_offset = max_seqlen, max_batch_size, 0
        if self.lengths_per_sample is not None:
            self.lengths_per_sample.zero_()


@dataclasses.dataclass
class GenerateOutput:
    sequences: torch.Tensor
    scores: Optional[tuple] = None


def _top_p_filter(logits, top_p):
    """Sets to -inf the logits outside the smallest set whose probability reaches top_p."""
    if top_p <= 0.0 or top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=False)
    drop_sorted = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


def sample(logits, top_k=1, top_p=0.0, min_p=0.0, temperature=1.0):
    """One token per row of logits (B, V): argmax when top_k == 1, else a draw from the
    softmax after top-k, temperature, top-p (and min-p without top-k), as mamba_ssm."""
    if top_k == 1:
        return logits.argmax(dim=-1)
    if top_k > 0:
        values, indices = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1)
        values = _top_p_filter(values / temperature, top_p)
        choice = torch.multinomial(torch.softmax(values, dim=-1), num_samples=1)
        return indices.gather(-1, choice).squeeze(-1)
    logits = logits / temperature
    if 0.0 < min_p < 1.0:
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values,
                                    float("-inf"))
    logits = _top_p_filter(logits, top_p)
    return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1).squeeze(-1)


@torch.inference_mode()
def decode(input_ids, model, max_length, top_k=1, top_p=0.0, min_p=0.0, temperature=1.0,
           eos_token_id=None, vocab_size=None, output_scores=False, cg=False, **kwargs):
    """input_ids (B, L) -> GenerateOutput(sequences (B, <= max_length), scores): tokens until
    max_length, or until every sequence has produced eos_token_id."""
    if cg:
        raise NotImplementedError("generate: cg=True (CUDA graphs) is not supported by "
                                  "ssmkit.torch")
    batch, prompt_len = input_ids.shape
    params = InferenceParams(max_seqlen=max_length, max_batch_size=batch)
    sequences, scores = [input_ids], []
    while True:
        logits = model(sequences[-1], inference_params=params, num_last_tokens=1).logits[:, -1]
        if vocab_size is not None:
            logits = logits[..., :vocab_size]
        if output_scores:
            scores.append(logits.clone())
        params.seqlen_offset += sequences[-1].shape[1]
        token = sample(logits, top_k=top_k, top_p=top_p, min_p=min_p, temperature=temperature)
        sequences.append(token.unsqueeze(1))
        if params.seqlen_offset >= max_length - 1:
            break
        if eos_token_id is not None and bool((token == eos_token_id).all()):
            break
    return GenerateOutput(sequences=torch.cat(sequences, dim=1), scores=tuple(scores))


class GenerationMixin:
    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        raise NotImplementedError

    def generate(self, input_ids, max_length, top_k=1, top_p=0.0, min_p=0.0, temperature=1.0,
                 return_dict_in_generate=False, output_scores=False, **kwargs):
        output = decode(input_ids, self, max_length, top_k=top_k, top_p=top_p, min_p=min_p,
                        temperature=temperature, output_scores=output_scores, **kwargs)
        if not output_scores:
            output.scores = None
        return output if return_dict_in_generate else output.sequences
