defmodule Ssmkit.Ops do
  @moduledoc """
  Every op of ssmkit, forward and backward, with mamba_ssm's names and arguments
  (docs/ops.md), on `Ssmkit.Tensor`s. Lower-case names stand for mamba_ssm's capitals: `a` is
  `A`, `b` is `B`, `d` is `D`; a gradient is `d` + the input's name (`da`, `db`, `ddelta`).

  Each function returns `{:ok, result}` or `{:error, message}`, the message the C ABI's
  (`"<op>: <argument>: expected <what>, given <what>"`). Inputs are read in place; each output
  is one new binary. Calls estimated above about a millisecond of work run on a dirty CPU
  scheduler (`dirty: true | false` forces the choice).

  Dimension legend: B batch, L length, D channels, N state size, H heads, P head dim, G groups,
  K conv width, S packed sequences, M rows, E features, T rows and K/M features of `linear`.

  The decode steps, `selective_state_update/7` and `causal_conv1d_update/4`, update a state
  held by `Ssmkit.State` in place.
  """

  alias Ssmkit.{NIF, Tensor}

  @type tensor :: Tensor.t() | {binary, Tensor.type(), tuple}
  @type grads :: %{optional(atom) => Tensor.t()}

  @scan_algorithms %{sequential: 0, chunked: 1, blelloch: 2, hillis_steele: 3, log_space: 4}
  @ssd_algorithms %{auto: 0, chunked: 1, sequential: 2}

  # ---------------------------------------------------------------- selective scan (Mamba-1)

  @doc """
  Mamba-1's selective scan, `selective_scan_fn(u, delta, A, B, C, D, z, delta_bias,
  delta_softplus, return_last_state)`.

  u, delta: (B, D, L); a: (D, N); b, c: (D, N), (B, N, L) or (B, G, N, L). Options: `d` (D),
  `z` (B, D, L), `delta_bias` (D), `delta_softplus`, `initial_state` (B, D, N), `seq_idx`
  (B, L) s32, `cu_seqlens` (S + 1), `algorithm` (`:sequential`, `:chunked`, `:blelloch`,
  `:hillis_steele`, `:log_space`), `return_last_state`, `return_varlen_states`.

  Returns `{:ok, out}`, `{:ok, {out, last_state}}`, `{:ok, {out, varlen_states}}` or
  `{:ok, {out, last_state, varlen_states}}` as the `return_*` options ask.
  """
  @spec selective_scan_fn(tensor, tensor, tensor, tensor, tensor, keyword) ::
          {:ok, Tensor.t() | tuple} | {:error, String.t()}
  def selective_scan_fn(u, delta, a, b, c, opts \\ []) do
    args =
      tensors(u: u, delta: delta, a: a, b: b, c: c)
      |> Map.merge(scan_options(opts))
      |> flags(opts, [:return_last_state, :return_varlen_states])

    with {:ok, r} <- NIF.selective_scan_fwd(args) do
      {:ok,
       returned(r, :out,
         last_state: opts[:return_last_state],
         varlen_states: opts[:return_varlen_states]
       )}
    end
  end

  @doc """
  The gradients of `selective_scan_fn/6` for `dout` (B, D, L): `%{du, ddelta, da, db, dc}`
  plus `dd`, `dz`, `ddelta_bias`, `dinitial_state` for the inputs given. Options: those of the
  forward, and `dlast_state` (B, D, N), `dvarlen_states` (S, D, N).
  """
  @spec selective_scan_bwd(tensor, tensor, tensor, tensor, tensor, tensor, keyword) ::
          {:ok, grads} | {:error, String.t()}
  def selective_scan_bwd(u, delta, a, b, c, dout, opts \\ []) do
    args =
      tensors(u: u, delta: delta, a: a, b: b, c: c, dout: dout)
      |> Map.merge(scan_options(opts))
      |> Map.merge(tensors(Keyword.take(opts, [:dlast_state, :dvarlen_states])))

    NIF.selective_scan_bwd(args) |> grads()
  end

  defp scan_options(opts) do
    tensors(Keyword.take(opts, [:d, :z, :delta_bias, :initial_state, :seq_idx, :cu_seqlens]))
    |> flags(opts, [:delta_softplus, :dirty])
    |> put_enum(:algorithm, opts[:algorithm], @scan_algorithms)
    |> put_int(:chunk_length, opts[:chunk_length])
  end

  # ---------------------------------------------------------------- SSD (Mamba-2)

  @doc """
  Mamba-2's chunked scan, `mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, ...)`.

  x: (B, L, H, P); dt: (B, L, H); a: (H); b, c: (B, L, G, N); `chunk_size` (0 or nil: the
  default; speed only). Options: `d` (H) or (H, P), `z` (B, L, H, P), `dt_bias` (H),
  `initial_states` (B, H, P, N), `seq_idx` (B, L) s32, `cu_seqlens` (S + 1), `dt_softplus`,
  `dt_limit` `{min, max}`, `algorithm` (`:auto`, `:chunked`, `:sequential`),
  `return_final_states`, `return_varlen_states`.

  Returns `{:ok, out}`, or a tuple with the states asked for, as `selective_scan_fn/6`.
  """
  @spec mamba_chunk_scan_combined(tensor, tensor, tensor, tensor, tensor, integer | nil, keyword) ::
          {:ok, Tensor.t() | tuple} | {:error, String.t()}
  def mamba_chunk_scan_combined(x, dt, a, b, c, chunk_size, opts \\ []) do
    args =
      tensors(x: x, dt: dt, a: a, b: b, c: c)
      |> Map.merge(ssd_options(chunk_size, opts))
      |> flags(opts, [:return_final_states, :return_varlen_states])

    with {:ok, r} <- NIF.ssd_fwd(args) do
      {:ok,
       returned(r, :out,
         final_states: opts[:return_final_states],
         varlen_states: opts[:return_varlen_states]
       )}
    end
  end

  @doc """
  The gradients of `mamba_chunk_scan_combined/7` for `dout` (B, L, H, P): `%{dx, ddt, da, db,
  dc}` plus `dd`, `dz`, `ddt_bias`, `dinitial_states` for the inputs given. Options: those of
  the forward, and `dfinal_states` (B, H, P, N), `dvarlen_states` (S, H, P, N).
  """
  @spec mamba_chunk_scan_combined_bwd(
          tensor,
          tensor,
          tensor,
          tensor,
          tensor,
          integer | nil,
          tensor,
          keyword
        ) :: {:ok, grads} | {:error, String.t()}
  def mamba_chunk_scan_combined_bwd(x, dt, a, b, c, chunk_size, dout, opts \\ []) do
    args =
      tensors(x: x, dt: dt, a: a, b: b, c: c, dout: dout)
      |> Map.merge(ssd_options(chunk_size, opts))
      |> Map.merge(tensors(Keyword.take(opts, [:dfinal_states, :dvarlen_states])))

    NIF.ssd_bwd(args) |> grads()
  end

  defp ssd_options(chunk_size, opts) do
    keys = [:d, :z, :dt_bias, :initial_states, :seq_idx, :cu_seqlens]

    base =
      tensors(Keyword.take(opts, keys))
      |> flags(opts, [:dt_softplus, :dirty])
      |> put_enum(:algorithm, opts[:algorithm], @ssd_algorithms)
      |> put_int(:chunk_size, chunk_size)

    case opts[:dt_limit] do
      nil -> base
      {lo, hi} -> Map.merge(base, %{has_dt_limit: true, dt_min: lo, dt_max: hi})
      other -> Map.put(base, :dt_limit, other)
    end
  end

  # ---------------------------------------------------------------- causal conv1d

  @doc """
  The depthwise causal convolution, `causal_conv1d_fn(x, weight, bias, activation)`.

  x: (B, D, L); weight: (D, K), 2 <= K <= 8. Options: `bias` (D), `initial_states`
  (B, D, K - 1), `seq_idx` (B, L) s32, `activation` (`nil` or `:silu`),
  `return_final_states`. Returns `{:ok, out}` or `{:ok, {out, final_states}}`.
  """
  @spec causal_conv1d_fn(tensor, tensor, keyword) ::
          {:ok, Tensor.t() | tuple} | {:error, String.t()}
  def causal_conv1d_fn(x, weight, opts \\ []) do
    args =
      tensors(x: x, weight: weight)
      |> Map.merge(conv_options(opts))
      |> flags(opts, [:return_final_states])

    with {:ok, r} <- NIF.causal_conv1d_fwd(args) do
      {:ok, returned(r, :out, final_states: opts[:return_final_states])}
    end
  end

  @doc """
  The gradients of `causal_conv1d_fn/3` for `dout` (B, D, L): `%{dx, dweight}` plus `dbias`,
  `dinitial_states` for the inputs given. Options: those of the forward and `dfinal_states`.
  """
  @spec causal_conv1d_bwd(tensor, tensor, tensor, keyword) :: {:ok, grads} | {:error, String.t()}
  def causal_conv1d_bwd(x, weight, dout, opts \\ []) do
    args =
      tensors(x: x, weight: weight, dout: dout)
      |> Map.merge(conv_options(opts))
      |> Map.merge(tensors(Keyword.take(opts, [:dfinal_states])))

    NIF.causal_conv1d_bwd(args) |> grads()
  end

  defp conv_options(opts) do
    tensors(Keyword.take(opts, [:bias, :initial_states, :seq_idx]))
    |> flags(opts, [:dirty])
    |> Map.put(:silu, silu?(opts[:activation]))
  end

  defp silu?(nil), do: false
  defp silu?(a) when a in [:silu, :swish, "silu", "swish"], do: true
  defp silu?(other), do: other

  # ---------------------------------------------------------------- norms

  @doc """
  Gated RMSNorm, `rmsnorm_fn(x, weight, bias, z, eps, group_size, norm_before_gate)`.

  x: (M, E) or (..., E); weight: (E). Options: `bias` (E), `z` (x's shape) the gate, `eps` (1.0e-6),
  `group_size` (0: E), `norm_before_gate` (true). Returns `{:ok, out}`.
  """
  @spec rmsnorm_fn(tensor, tensor, keyword) :: {:ok, Tensor.t()} | {:error, String.t()}
  def rmsnorm_fn(x, weight, opts \\ []) do
    with {:ok, %{out: out}} <- NIF.rmsnorm_fwd(rmsnorm_args(x, weight, opts)) do
      {:ok, Tensor.from_nif(out) |> like(x)}
    end
  end

  @doc "The gradients of `rmsnorm_fn/3` for `dout` (M, E): `%{dx, dweight}` plus `dbias`, `dz`."
  @spec rmsnorm_bwd(tensor, tensor, tensor, keyword) :: {:ok, grads} | {:error, String.t()}
  def rmsnorm_bwd(x, weight, dout, opts \\ []) do
    NIF.rmsnorm_bwd(Map.merge(rmsnorm_args(x, weight, opts), %{dout: rows(dout)}))
    |> grads()
    |> grads_like(x, [:dx, :dz])
  end

  defp rmsnorm_args(x, weight, opts) do
    %{x: rows(x), weight: Tensor.to_nif(weight), z: rows(opts[:z])}
    |> Map.merge(tensors(Keyword.take(opts, [:bias])))
    |> flags(opts, [:norm_before_gate, :dirty])
    |> put_number(:eps, opts[:eps])
    |> put_int(:group_size, opts[:group_size])
  end

  @doc """
  Residual add + RMSNorm, `rms_norm_fn(x, weight, bias, residual, prenorm, eps)`:
  `residual_out = x + residual` (f32), `out = rmsnorm(residual_out)`.

  x: (M, E) or (..., E); weight: (E). Options: `bias`, `residual` (x's shape) f32, `eps`
  (1.0e-6), `prenorm`.
  Returns `{:ok, out}`, or `{:ok, {out, residual_out}}` with `prenorm: true`.
  """
  @spec rms_norm_fn(tensor, tensor, keyword) :: {:ok, Tensor.t() | tuple} | {:error, String.t()}
  def rms_norm_fn(x, weight, opts \\ []) do
    with {:ok, r} <- NIF.add_rmsnorm_fwd(add_rmsnorm_args(x, weight, opts)) do
      case returned(r, :out, residual_out: opts[:prenorm]) do
        {out, residual_out} -> {:ok, {like(out, x), like(residual_out, x)}}
        out -> {:ok, like(out, x)}
      end
    end
  end

  @doc """
  The gradients of `rms_norm_fn/3` for `dout` (M, E) and, with `prenorm`, `dresidual_out`
  (M, E): `%{dx, dweight}` plus `dresidual`, `dbias` for the inputs given.
  """
  @spec rms_norm_bwd(tensor, tensor, tensor, keyword) :: {:ok, grads} | {:error, String.t()}
  def rms_norm_bwd(x, weight, dout, opts \\ []) do
    args =
      add_rmsnorm_args(x, weight, opts)
      |> Map.merge(%{dout: rows(dout), dresidual_out: rows(opts[:dresidual_out])})

    NIF.add_rmsnorm_bwd(args) |> grads() |> grads_like(x, [:dx, :dresidual])
  end

  defp add_rmsnorm_args(x, weight, opts) do
    %{x: rows(x), weight: Tensor.to_nif(weight), residual: rows(opts[:residual])}
    |> Map.merge(tensors(Keyword.take(opts, [:bias])))
    |> flags(opts, [:dirty])
    |> put_number(:eps, opts[:eps])
  end

  # ---------------------------------------------------------------- linear

  @doc """
  PyTorch's `F.linear(x, weight, bias)`: `out = x weight^T + bias`.

  x: (T, K) f32; weight: (M, K) f32, bf16 or f16 (PyTorch's layout). Options: `bias` (M).
  Returns `{:ok, out}`, (T, M) f32.
  """
  @spec linear(tensor, tensor, keyword) :: {:ok, Tensor.t()} | {:error, String.t()}
  def linear(x, weight, opts \\ []) do
    args = tensors(x: x, weight: weight, bias: opts[:bias]) |> flags(opts, [:dirty])

    with {:ok, %{out: out}} <- NIF.linear_fwd(args), do: {:ok, Tensor.from_nif(out)}
  end

  @doc """
  The gradients of `linear/3` for `dout` (T, M): `%{dx, dweight}` plus `dbias` with a bias.
  The weight must be f32. `dx: false` skips dx (a first layer, whose input is data).
  """
  @spec linear_bwd(tensor, tensor, tensor, keyword) :: {:ok, grads} | {:error, String.t()}
  def linear_bwd(x, weight, dout, opts \\ []) do
    args =
      tensors(x: x, weight: weight, bias: opts[:bias], dout: dout)
      |> flags(opts, [:dirty])
      |> Map.put(:want_dx, Keyword.get(opts, :dx, true))

    NIF.linear_bwd(args) |> grads()
  end

  # ---------------------------------------------------------------- decode steps

  @doc """
  One decode step, `selective_state_update(state, x, dt, A, B, C, D, z, dt_bias,
  dt_softplus)`, on a state held by `Ssmkit.State`, updated in place.

  Mamba-1: state (B, D, N), x and dt (B, D), a (D, N), b and c (B, N) or (B, G, N).
  Mamba-2: state (B, H, P, N), x (B, H, P), dt (B, H), a (H). Options: `d`, `z`, `dt_bias`,
  `dt_softplus`, `state_batch_indices` (B) s32. Returns `{:ok, out}` (x's shape).
  """
  @spec selective_state_update(
          Ssmkit.State.t(),
          tensor,
          tensor,
          tensor,
          tensor,
          tensor,
          keyword
        ) :: {:ok, Tensor.t()} | {:error, String.t()}
  def selective_state_update(state, x, dt, a, b, c, opts \\ []) do
    args =
      tensors(x: x, dt: dt, a: a, b: b, c: c)
      |> Map.merge(tensors(Keyword.take(opts, [:d, :z, :dt_bias, :state_batch_indices])))
      |> flags(opts, [:dt_softplus, :dirty])

    with {:ok, %{out: out}} <- NIF.selective_state_update(state, args) do
      {:ok, Tensor.from_nif(out)}
    end
  end

  @doc """
  One step of the causal convolution, `causal_conv1d_update(x, conv_state, weight, bias,
  activation)`, on a conv state (B, D, S), S >= K - 1, held by `Ssmkit.State` and shifted in
  place. x: (B, D) or (B, D, T). Options: `bias`, `activation`. Returns `{:ok, out}`.
  """
  @spec causal_conv1d_update(Ssmkit.State.t(), tensor, tensor, keyword) ::
          {:ok, Tensor.t()} | {:error, String.t()}
  def causal_conv1d_update(conv_state, x, weight, opts \\ []) do
    args =
      tensors(x: x, weight: weight, bias: opts[:bias])
      |> flags(opts, [:dirty])
      |> Map.put(:silu, silu?(opts[:activation]))

    with {:ok, %{out: out}} <- NIF.causal_conv1d_update(conv_state, args) do
      {:ok, Tensor.from_nif(out)}
    end
  end

  # ---------------------------------------------------------------- argument plumbing

  defp tensors(kv), do: Map.new(kv, fn {k, v} -> {k, Tensor.to_nif(v)} end)

  defp flags(map, opts, keys) do
    Enum.reduce(keys, map, fn key, acc ->
      case Keyword.fetch(opts, key) do
        {:ok, nil} -> acc
        {:ok, value} -> Map.put(acc, key, value)
        :error -> acc
      end
    end)
  end

  defp put_int(map, _key, nil), do: map
  defp put_int(map, key, value), do: Map.put(map, key, value)
  defp put_number(map, _key, nil), do: map
  defp put_number(map, key, value), do: Map.put(map, key, value)

  # A name from `names`, or the value as given (an integer the C ABI checks, or a bad term the
  # NIF reports).
  defp put_enum(map, _key, nil, _names), do: map
  defp put_enum(map, key, value, names), do: Map.put(map, key, Map.get(names, value, value))

  # {:ok, out} or a tuple of out and the extras asked for, in order.
  defp returned(result, main, extras) do
    out = Tensor.from_nif(Map.fetch!(result, main))
    asked = for {key, true} <- extras, do: Tensor.from_nif(Map.fetch!(result, key))
    if asked == [], do: out, else: List.to_tuple([out | asked])
  end

  defp grads({:ok, map}), do: {:ok, Map.new(map, fn {k, v} -> {k, Tensor.from_nif(v)} end)}
  defp grads(error), do: error

  # The norms work on rows (M, E): a (..., E) tensor goes as rows and what has its shape comes
  # back in it, as mamba_ssm's norms take any leading dims.
  defp rows({data, type, shape}) when is_tuple(shape) and tuple_size(shape) > 2 do
    e = elem(shape, tuple_size(shape) - 1)
    {data, type, {div(Tensor.size(shape), max(e, 1)), e}}
  end

  defp rows(%Tensor{} = t), do: rows(Tensor.to_nif(t))
  defp rows(t), do: t

  defp like(%Tensor{} = t, x) do
    case Tensor.to_nif(x) do
      {_, _, shape} when is_tuple(shape) and tuple_size(shape) > 2 -> %{t | shape: shape}
      _ -> t
    end
  end

  defp grads_like({:ok, map}, x, keys) do
    {:ok,
     Enum.reduce(keys, map, fn k, acc ->
       if acc[k], do: %{acc | k => like(acc[k], x)}, else: acc
     end)}
  end

  defp grads_like(error, _x, _keys), do: error
end
