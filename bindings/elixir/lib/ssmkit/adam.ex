defmodule Ssmkit.Adam do
  @moduledoc """
  Adam (Kingma & Ba), written in Elixir over f32 binaries: for each parameter p with gradient g,

      m = b1 m + (1 - b1) g
      v = b2 v + (1 - b2) g^2
      p = p - lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)

  (the bias correction folded into the step size, as `python/tests/mamba_model.py` does).
  Parameters are any nesting of maps and lists with `Ssmkit.Tensor` leaves; the gradients have
  the same structure. One pass per tensor building three binaries; a NaN or infinity in a
  gradient raises ArgumentError.
  """

  alias Ssmkit.Tensor

  defstruct [:m, :v, t: 0, lr: 3.0e-3, b1: 0.9, b2: 0.999, eps: 1.0e-8]

  @type t :: %__MODULE__{}

  @doc "Zero moments for `params`; options `lr`, `b1`, `b2`, `eps`."
  @spec init(term, keyword) :: t
  def init(params, opts \\ []) do
    zeros = map_leaves(params, fn %Tensor{} = p -> Tensor.zeros(p.shape) end)
    struct!(%__MODULE__{m: zeros, v: zeros}, opts)
  end

  @doc "One step: `{new_params, new_state}`."
  @spec update(term, term, t) :: {term, t}
  def update(params, grads, %__MODULE__{} = s) do
    t = s.t + 1
    step = s.lr * :math.sqrt(1 - :math.pow(s.b2, t)) / (1 - :math.pow(s.b1, t))
    c = {s.b1, 1 - s.b1, s.b2, 1 - s.b2, step, s.eps}

    {p, m, v} =
      zip_leaves(params, grads, s.m, s.v, fn p, g, m, v ->
        Ssmkit.Policy.Elementwise.finite!(g.data, "gradient")
        {pd, md, vd} = loop(p.data, g.data, m.data, v.data, c, <<>>, <<>>, <<>>)
        {%{p | data: pd}, %{m | data: md}, %{v | data: vd}}
      end)

    {p, %{s | m: m, v: v, t: t}}
  end

  defp loop(
         <<p::float-32-native, ps::binary>>,
         <<g::float-32-native, gs::binary>>,
         <<m::float-32-native, ms::binary>>,
         <<v::float-32-native, vs::binary>>,
         {b1, c1, b2, c2, step, eps} = c,
         pa,
         ma,
         va
       ) do
    m = b1 * m + c1 * g
    v = b2 * v + c2 * g * g
    p = p - step * m / (:math.sqrt(v) + eps)

    loop(
      ps,
      gs,
      ms,
      vs,
      c,
      <<pa::binary, p::float-32-native>>,
      <<ma::binary, m::float-32-native>>,
      <<va::binary, v::float-32-native>>
    )
  end

  defp loop(<<>>, <<>>, <<>>, <<>>, _c, pa, ma, va), do: {pa, ma, va}

  @doc false
  # fun applied to every tensor leaf of a nesting of maps and lists.
  def map_leaves(%Tensor{} = t, fun), do: fun.(t)
  def map_leaves(list, fun) when is_list(list), do: Enum.map(list, &map_leaves(&1, fun))
  def map_leaves(%{} = map, fun), do: Map.new(map, fn {k, v} -> {k, map_leaves(v, fun)} end)

  # fun(p, g, m, v) -> {p, m, v} over four trees of the same structure; three trees back.
  defp zip_leaves(%Tensor{} = p, g, m, v, fun), do: fun.(p, g, m, v)

  defp zip_leaves(p, g, m, v, fun) when is_list(p) do
    [p, g, m, v]
    |> Enum.zip()
    |> Enum.map(fn {p, g, m, v} -> zip_leaves(p, g, m, v, fun) end)
    |> unzip3()
  end

  defp zip_leaves(%{} = p, g, m, v, fun) do
    entries =
      for {k, pk} <- p,
          do: {k, zip_leaves(pk, Map.fetch!(g, k), Map.fetch!(m, k), Map.fetch!(v, k), fun)}

    {Map.new(entries, fn {k, {a, _, _}} -> {k, a} end),
     Map.new(entries, fn {k, {_, b, _}} -> {k, b} end),
     Map.new(entries, fn {k, {_, _, c}} -> {k, c} end)}
  end

  defp unzip3(triples) do
    {Enum.map(triples, &elem(&1, 0)), Enum.map(triples, &elem(&1, 1)),
     Enum.map(triples, &elem(&1, 2))}
  end
end
