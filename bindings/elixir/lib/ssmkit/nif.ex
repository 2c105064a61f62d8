defmodule Ssmkit.NIF do
  # The NIF library (c_src/, built into priv/ssmkit_nif.so by the Makefile). Every function
  # returns {:ok, result} or {:error, message}; the modules around it give them their
  # mamba_ssm-style names and arguments.
  @moduledoc false
  @on_load :load

  def load do
    path = :filename.join(:code.priv_dir(:ssmkit), ~c"ssmkit_nif")

    case :erlang.load_nif(path, 0) do
      :ok ->
        :ok

      {:error, {:load_failed, _}} = error ->
        IO.warn(
          "ssmkit: could not load #{path}.so (built against another libssmkit ABI, or " <>
            "libssmkit.so not found): #{inspect(error)}"
        )

        error

      error ->
        error
    end
  end

  defp nif, do: :erlang.nif_error(:ssmkit_nif_not_loaded)

  # ops (c_src/nif_ops.c): one map of arguments each
  def selective_scan_fwd(_args), do: nif()
  def selective_scan_bwd(_args), do: nif()
  def ssd_fwd(_args), do: nif()
  def ssd_bwd(_args), do: nif()
  def causal_conv1d_fwd(_args), do: nif()
  def causal_conv1d_bwd(_args), do: nif()
  def rmsnorm_fwd(_args), do: nif()
  def rmsnorm_bwd(_args), do: nif()
  def add_rmsnorm_fwd(_args), do: nif()
  def add_rmsnorm_bwd(_args), do: nif()
  def linear_fwd(_args), do: nif()
  def linear_bwd(_args), do: nif()
  def set_num_threads(_n), do: nif()
  def num_threads, do: nif()
  def set_bf16_products(_enable), do: nif()
  def bf16_products, do: nif()
  def versions, do: nif()
  def live_counts, do: nif()

  # decode-step states (c_src/nif_state.c)
  def state_new(_shape), do: nif()
  def state_from_tensor(_tensor), do: nif()
  def state_to_tensor(_state), do: nif()
  def state_release(_state), do: nif()
  def selective_state_update(_state, _args), do: nif()
  def causal_conv1d_update(_state, _args), do: nif()

  # models, tokenizers, sessions (c_src/nif_model.c), streams (c_src/nif_stream.c)
  def model_load(_dir), do: nif()
  def model_load_default, do: nif()
  def model_config(_model), do: nif()
  def tokenizer_encode(_model, _text), do: nif()
  def tokenizer_decode(_model, _ids, _skip_special), do: nif()
  def session_new(_model, _max_batch), do: nif()
  def session_prefill(_session, _prompts), do: nif()
  def session_decode(_session, _tokens), do: nif()
  def stream_start(_model, _prompt, _opts, _ref), do: nif()
  def stream_cancel(_stream), do: nif()

  # layout moves (c_src/nif_layout.c)
  def tokens_to_channels(_x, _sizes), do: nif()
  def channels_to_tokens(_parts), do: nif()
  def add(_a, _b), do: nif()

  # a Mamba-1 network's window forward in one call (c_src/nif_net.c)
  def mamba1_net_fwd(_args), do: nif()
end
