"""What the Mamba and Mamba2 modules share: mamba_ssm's dt-bias initialisation, the decode
states kept in an InferenceParams, and packed sequences (cu_seqlens / seq_idx).

Dimension legend: B batch, S packed sequences, C conv channels, L length, W conv state width.
"""
import math

import torch


def dt_bias_init(size, dt_min, dt_max, dt_init_floor, device=None):
    """softplus^-1 of time steps drawn log-uniformly in [dt_min, dt_max] (at least
    dt_init_floor): softplus(bias) starts in that range, as in mamba_ssm."""
    log_dt = torch.rand(size, device=device) * (math.log(dt_max) - math.log(dt_min))
    dt = torch.exp(log_dt + math.log(dt_min)).clamp(min=dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))  # softplus(v) = dt  <=>  v = dt + log(1 - e^-dt)


def states_from_cache(mixer, inference_params, batch_size, initialize_states=False):
    """The (conv_state, ssm_state) of `mixer` (a module with layer_idx and
    allocate_inference_cache) in inference_params, allocated on first use."""
    if mixer.layer_idx is None:
        raise ValueError(f"{type(mixer).__name__}: decoding with inference_params needs "
                         f"layer_idx (the key of this layer's states)")
    states = inference_params.key_value_memory_dict
    if mixer.layer_idx not in states:
        states[mixer.layer_idx] = mixer.allocate_inference_cache(batch_size,
                                                                 inference_params.max_seqlen)
    elif initialize_states:
        for s in states[mixer.layer_idx]:
            s.zero_()
    return states[mixer.layer_idx]


def cache_batch(batch, cu_seqlens):
    """The rows of a mixer's decode states: one per packed sequence with cu_seqlens (S + 1),
    else one per batch row (as mamba_ssm's Mamba2)."""
    return batch if cu_seqlens is None else cu_seqlens.shape[0] - 1


def keep_conv_window(conv_state, x, cu_seqlens=None):
    """After a prefill, conv_state holds the last W inputs of the convolution x (B, C, L),
    zero-padded on the left where fewer were seen: conv_state (B, C, W), or with cu_seqlens
    (x (1, C, L) packing S sequences) (S, C, W), each sequence's own window (what mamba_ssm
    takes from causal-conv1d's causal_conv1d_varlen_states)."""
    width = conv_state.shape[-1]
    if cu_seqlens is None:
        conv_state.copy_(torch.nn.functional.pad(x, (width - x.shape[-1], 0)))
        return
    offsets = cu_seqlens.to(torch.int64)
    positions = offsets[1:, None] - width + torch.arange(width, device=x.device)  # (S, W)
    inside = positions >= offsets[:-1, None]
    windows = x[0][:, positions.clamp(min=0)]  # (C, S, W)
    conv_state.copy_(torch.where(inside, windows, 0).permute(1, 0, 2))


def conv_seq_idx(seq_idx, cu_seqlens, seqlen):
    """The seq_idx the convolution reads (it takes no cu_seqlens): seq_idx as given, else
    (1, L) numbering the sequences cu_seqlens packs, else None (one sequence per row)."""
    if seq_idx is not None or cu_seqlens is None:
        return seq_idx
    positions = torch.arange(seqlen, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return torch.searchsorted(cu_seqlens[1:], positions, right=True).to(torch.int32)[None]
