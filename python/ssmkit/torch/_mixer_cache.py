"""What the Mamba and Mamba2 modules share: mamba_ssm's dt-bias initialisation and the decode
states kept in an InferenceParams."""
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


def keep_conv_window(conv_state, x):
    """After a prefill, conv_state (B, D, W) holds the last W inputs of the convolution x
    (B, D, L), zero-padded on the left when L < W."""
    conv_state.copy_(torch.nn.functional.pad(x, (conv_state.shape[-1] - x.shape[-1], 0)))
