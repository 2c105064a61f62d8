defmodule Ssmkit.Tensor do
  @moduledoc """
  A tensor as Nx lays one out: a binary of row-major elements, an Nx type (`{:f, 32}`,
  `{:bf, 16}`, `{:f, 16}`, `{:s, 32}`, `{:s, 64}`) and a shape tuple. Every function of this
  package takes and returns these; the NIF reads the binary in place (no copy) and allocates
  each output once.

  From and to Nx (not a dependency of this package):

      t = Ssmkit.Tensor.new(Nx.to_binary(x), Nx.type(x), Nx.shape(x))
      x = Nx.from_binary(t.data, t.type) |> Nx.reshape(t.shape)

  A `{data, type, shape}` tuple is accepted wherever a tensor is.
  """

  @enforce_keys [:data, :type, :shape]
  defstruct [:data, :type, :shape]

  @type type :: {:f, 32} | {:bf, 16} | {:f, 16} | {:s, 32} | {:s, 64}
  @type t :: %__MODULE__{data: binary, type: type, shape: tuple}

  @doc "A tensor over `data`; raises ArgumentError unless its size is the shape's."
  @spec new(binary, type, tuple) :: t
  def new(data, type, shape) when is_binary(data) and is_tuple(shape) do
    expected = size(shape) * bytes(type)

    if byte_size(data) != expected do
      raise ArgumentError,
            "expected #{expected} bytes for shape #{inspect(shape)} of type #{inspect(type)}, " <>
              "given #{byte_size(data)}"
    end

    %__MODULE__{data: data, type: type, shape: shape}
  end

  @doc "The number of elements of a shape."
  @spec size(tuple) :: non_neg_integer
  def size(shape) when is_tuple(shape), do: shape |> Tuple.to_list() |> Enum.reduce(1, &(&1 * &2))

  @doc "Bytes per element of a type."
  @spec bytes(type) :: pos_integer
  def bytes({_, bits}) when bits in [16, 32, 64], do: div(bits, 8)

  @doc "A tensor of `shape` from a flat list of numbers (rounded to the type)."
  @spec from_list([number], tuple, type) :: t
  def from_list(values, shape, type \\ {:f, 32}) when is_list(values) do
    new(for(v <- values, into: <<>>, do: encode(v, type)), type, shape)
  end

  @doc "The elements as a flat list of numbers, in row-major order."
  @spec to_list(t) :: [number]
  def to_list(%__MODULE__{data: data, type: type}), do: decode(data, type)

  @doc "The same elements with another shape of the same size."
  @spec reshape(t, tuple) :: t
  def reshape(%__MODULE__{} = t, shape) do
    if size(shape) != size(t.shape) do
      raise ArgumentError, "cannot reshape #{inspect(t.shape)} to #{inspect(shape)}"
    end

    %{t | shape: shape}
  end

  @doc """
  The elements in another type: `{:f, 32}` to `{:bf, 16}` rounded to nearest even (as Nx does),
  `{:bf, 16}` to `{:f, 32}` exactly; the same type unchanged.
  """
  @spec as_type(t, type) :: t
  def as_type(%__MODULE__{type: type} = t, type), do: t

  def as_type(%__MODULE__{type: {:f, 32}, data: data} = t, {:bf, 16}) do
    %{
      t
      | type: {:bf, 16},
        data: for(<<bits::32-native <- data>>, into: <<>>, do: <<bf16_round(bits)::16-native>>)
    }
  end

  def as_type(%__MODULE__{type: {:bf, 16}, data: data} = t, {:f, 32}) do
    %{
      t
      | type: {:f, 32},
        data: for(<<b::16-native <- data>>, into: <<>>, do: <<Bitwise.bsl(b, 16)::32-native>>)
    }
  end

  def as_type(%__MODULE__{type: from}, to) do
    raise ArgumentError, "as_type: #{inspect(from)} to #{inspect(to)} is not supported"
  end

  @doc "A tensor of zeros."
  @spec zeros(tuple, type) :: t
  def zeros(shape, type \\ {:f, 32}) do
    new(:binary.copy(<<0>>, size(shape) * bytes(type)), type, shape)
  end

  @doc false
  # The NIF's form, {data, type, shape}; nil stays nil (an absent argument).
  def to_nif(nil), do: nil
  def to_nif(%__MODULE__{data: d, type: t, shape: s}), do: {d, t, s}
  def to_nif(other), do: other

  @doc false
  def from_nif({data, type, shape}), do: %__MODULE__{data: data, type: type, shape: shape}

  defp encode(v, {:f, 32}), do: <<v::float-32-native>>
  defp encode(v, {:f, 16}), do: <<v::float-16-native>>
  defp encode(v, {:bf, 16}), do: <<bf16_bits(v)::16-native>>
  defp encode(v, {:s, 32}), do: <<v::signed-32-native>>
  defp encode(v, {:s, 64}), do: <<v::signed-64-native>>

  defp bf16_bits(v) do
    <<bits::32-native>> = <<v::float-32-native>>
    bf16_round(bits)
  end

  # Round to nearest even from f32 bits, as Nx does.
  defp bf16_round(bits),
    do: (bits + 0x7FFF + Bitwise.band(Bitwise.bsr(bits, 16), 1)) |> Bitwise.bsr(16)

  defp decode(data, {:f, 32}), do: for(<<v::float-32-native <- data>>, do: v)
  defp decode(data, {:f, 16}), do: for(<<v::float-16-native <- data>>, do: v)
  defp decode(data, {:s, 32}), do: for(<<v::signed-32-native <- data>>, do: v)
  defp decode(data, {:s, 64}), do: for(<<v::signed-64-native <- data>>, do: v)

  defp decode(data, {:bf, 16}) do
    for <<b::16-native <- data>> do
      <<v::float-32-native>> = <<Bitwise.bsl(b, 16)::32-native>>
      v
    end
  end
end
