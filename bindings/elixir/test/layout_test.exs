defmodule Ssmkit.LayoutTest do
  # The layout moves against plain Elixir transposes, and each the other's inverse.
  use ExUnit.Case, async: true
  import Ssmkit.TestHelpers
  alias Ssmkit.{Layout, Tensor}

  test "tokens_to_channels transposes and splits; channels_to_tokens undoes it" do
    seed!()
    {b, l, f} = {3, 5, 7}
    x = randn({b, l, f})
    {:ok, [p1, p2]} = Layout.tokens_to_channels(x, [3, 4])
    assert p1.shape == {b, 3, l} and p2.shape == {b, 4, l}
    v = Tensor.to_list(x) |> List.to_tuple()
    at = fn bi, li, fi -> elem(v, (bi * l + li) * f + fi) end
    want1 = for bi <- 0..(b - 1), fi <- 0..2, li <- 0..(l - 1), do: at.(bi, li, fi)
    want2 = for bi <- 0..(b - 1), fi <- 3..6, li <- 0..(l - 1), do: at.(bi, li, fi)
    assert Tensor.to_list(p1) == want1
    assert Tensor.to_list(p2) == want2
    assert {:ok, x} == Layout.channels_to_tokens([p1, p2])
  end

  test "add, and bad input" do
    a = Tensor.from_list([1.0, 2.0], {2})
    assert {:ok, %Tensor{} = s} = Layout.add(a, a)
    assert Tensor.to_list(s) == [2.0, 4.0]
    assert {:error, _} = Layout.add(a, Tensor.from_list([1.0], {1}))
    assert {:error, _} = Layout.tokens_to_channels(randn({2, 3, 4}), [1, 2])
    assert {:error, _} = Layout.tokens_to_channels(randn({2, 3}), [3])
    assert {:error, _} = Layout.channels_to_tokens([randn({2, 3, 4}), randn({2, 3, 5})])
    assert {:error, _} = Layout.channels_to_tokens([])
  end
end
