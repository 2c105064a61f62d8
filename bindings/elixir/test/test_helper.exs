# One thread by default: results are deterministic for a thread count, and one thread is
# what most tests need. The tests that need more set it themselves.
Ssmkit.set_num_threads(1)
ExUnit.start()

defmodule Ssmkit.TestHelpers do
  @moduledoc false
  import ExUnit.Assertions
  alias Ssmkit.Tensor

  @fixtures Path.join(__DIR__, "fixtures")

  @doc "A fixture file (make_fixtures.py) as %{case => %{name => Tensor}}."
  def fixture(name) do
    {cases, _} = Code.eval_file(Path.join(@fixtures, name <> ".exs"))

    Map.new(cases, fn {case_name, arrays} ->
      {case_name,
       Map.new(arrays, fn {k, {b64, type, shape}} ->
         {k, Tensor.new(Base.decode64!(b64), type, shape)}
       end)}
    end)
  end

  @doc "||got - want|| / ||want|| over f32/bf16 tensors; infinite for a shape or NaN mismatch."
  def rel_err(%Tensor{shape: s} = got, %Tensor{shape: s} = want) do
    g = Tensor.to_list(got)
    w = Tensor.to_list(want)

    if length(g) != length(w) or Enum.any?(g, &(not is_number(&1))) do
      :infinity
    else
      {diff, norm} =
        Enum.zip(g, w)
        |> Enum.reduce({0.0, 0.0}, fn {a, b}, {d, n} -> {d + (a - b) * (a - b), n + b * b} end)

      if norm == 0.0, do: :math.sqrt(diff), else: :math.sqrt(diff / norm)
    end
  end

  def rel_err(_got, _want), do: :infinity

  @doc "Asserts got matches want to `tol` relative error, naming `what`."
  def assert_close(got, want, tol, what) do
    err = rel_err(got, want)

    assert err != :infinity and err <= tol,
           "#{what}: relative error #{inspect(err)} > #{tol} " <>
             "(shapes #{inspect(shape(got))} vs #{inspect(shape(want))})"
  end

  defp shape(%Tensor{shape: s}), do: s
  defp shape(other), do: other

  @doc "A seeded f32 tensor of N(0, scale^2) entries."
  def randn(shape, scale \\ 1.0) do
    Tensor.from_list(for(_ <- 1..Tensor.size(shape), do: :rand.normal() * scale), shape)
  end

  @doc "Seeds :rand for this process and prints the seed on failure (via the returned tag)."
  def seed! do
    seed =
      case System.get_env("SSMKIT_TEST_SEED") do
        nil -> :erlang.unique_integer([:positive]) + System.os_time()
        s -> String.to_integer(s)
      end

    :rand.seed(:exsss, {seed, 1, 2})
    seed
  end
end
