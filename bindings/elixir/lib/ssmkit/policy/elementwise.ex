defmodule Ssmkit.Policy.Elementwise do
  # The few element-by-element steps of the policy network that are not ops, in plain Elixir
  # over f32 binaries: A = -exp(A_log) and its chain rule, the mean-squared error and its
  # gradient. Small next to the ops (D * N elements, or the (B, L, outputs) of the head).
  # A non-finite value does not match a float pattern: it is reported as such, not as a
  # FunctionClauseError.
  @moduledoc false

  alias Ssmkit.Tensor

  @doc "-exp(t) (A from A_log)."
  def neg_exp(%Tensor{type: {:f, 32}} = t) do
    %{
      t
      | data:
          for(<<v::float-32-native <- finite!(t.data, "A_log")>>,
            into: <<>>,
            do: <<-:math.exp(v)::float-32-native>>
          )
    }
  end

  @doc "a * b, element by element."
  def mul(%Tensor{type: {:f, 32}, shape: shape} = a, %Tensor{type: {:f, 32}, shape: shape} = b) do
    %{a | data: mul_loop(finite!(a.data, "a"), finite!(b.data, "b"), <<>>)}
  end

  defp mul_loop(<<x::float-32-native, xs::binary>>, <<y::float-32-native, ys::binary>>, acc),
    do: mul_loop(xs, ys, <<acc::binary, x * y::float-32-native>>)

  defp mul_loop(<<>>, <<>>, acc), do: acc

  @doc "The mean of (out - target)^2 and its gradient 2 (out - target) / count."
  def mse(
        %Tensor{type: {:f, 32}, shape: shape} = out,
        %Tensor{type: {:f, 32}, shape: shape} = target
      ) do
    count = Tensor.size(shape)

    {sum, grad} =
      mse_loop(
        finite!(out.data, "the output"),
        finite!(target.data, "the target"),
        2.0 / count,
        0.0,
        <<>>
      )

    {sum / count, %{out | data: grad}}
  end

  defp mse_loop(
         <<o::float-32-native, os::binary>>,
         <<t::float-32-native, ts::binary>>,
         scale,
         sum,
         acc
       ) do
    e = o - t
    mse_loop(os, ts, scale, sum + e * e, <<acc::binary, scale * e::float-32-native>>)
  end

  defp mse_loop(<<>>, <<>>, _scale, sum, acc), do: {sum, acc}

  # Every element a finite f32 (NaN and infinities have all eight exponent bits set). A float
  # pattern does not match them, and a comprehension would silently skip them.
  @doc false
  def finite!(data, what) do
    if finite?(data), do: data, else: raise(ArgumentError, "#{what}: a NaN or an infinity")
  end

  defp finite?(<<bits::32-native, rest::binary>>),
    do: Bitwise.band(bits, 0x7F800000) != 0x7F800000 and finite?(rest)

  defp finite?(<<>>), do: true
end
