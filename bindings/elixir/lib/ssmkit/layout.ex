defmodule Ssmkit.Layout do
  @moduledoc """
  The layout moves a network built on the ops needs: `Ssmkit.Ops.linear/3` works on rows of
  tokens (B * L, F) while the scans and the convolution take channels first (B, F, L). With Nx
  these are `Nx.transpose/2`, `Nx.split/3`, `Nx.concatenate/2` and `Nx.add/2`; this package has
  no Nx, so they are NIFs here (f32, one pass each). Each is the other's adjoint, which is how
  the backward of a network uses them.
  """

  alias Ssmkit.{NIF, Tensor}

  @doc "Splits the features of x (B, L, F) into parts (B, F_i, L) of the given sizes."
  @spec tokens_to_channels(Ssmkit.Ops.tensor(), [pos_integer]) ::
          {:ok, [Tensor.t()]} | {:error, String.t()}
  def tokens_to_channels(x, sizes) do
    with {:ok, parts} <- NIF.tokens_to_channels(Tensor.to_nif(x), sizes) do
      {:ok, Enum.map(parts, &Tensor.from_nif/1)}
    end
  end

  @doc "Joins parts (B, F_i, L) into (B, L, F_0 + F_1 + ...)."
  @spec channels_to_tokens([Ssmkit.Ops.tensor()]) :: {:ok, Tensor.t()} | {:error, String.t()}
  def channels_to_tokens(parts) when is_list(parts) do
    with {:ok, t} <- NIF.channels_to_tokens(Enum.map(parts, &Tensor.to_nif/1)) do
      {:ok, Tensor.from_nif(t)}
    end
  end

  @doc "a + b, element by element (f32, same shape)."
  @spec add(Ssmkit.Ops.tensor(), Ssmkit.Ops.tensor()) :: {:ok, Tensor.t()} | {:error, String.t()}
  def add(a, b) do
    with {:ok, t} <- NIF.add(Tensor.to_nif(a), Tensor.to_nif(b)), do: {:ok, Tensor.from_nif(t)}
  end
end
