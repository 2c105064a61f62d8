defmodule Ssmkit.Bf16Test do
  # The opt-in bf16 products from Elixir: Tensor.as_type's rounding, the process-wide switch
  # (hence not async: it changes what every linear op with a bf16 weight computes), and the
  # policy window with its projections' weights in bf16, against the same weights widened to
  # f32: equal to them with the products off, within x's rounding to bf16 with them on.
  use ExUnit.Case, async: false
  import Ssmkit.TestHelpers
  alias Ssmkit.{Policy, Tensor}

  setup do
    on_exit(fn -> Ssmkit.set_bf16_products(false) end)
  end

  test "as_type rounds f32 to bf16 to nearest even and widens bf16 exactly" do
    half = :math.pow(2, -8)
    t = Tensor.from_list([1.0, 1.0 + half, 1.0 + 3 * half, -2.5], {2, 2})
    b = Tensor.as_type(t, {:bf, 16})
    assert {b.type, b.shape, byte_size(b.data)} == {{:bf, 16}, {2, 2}, 8}
    # Ties to even: 1 + 2^-8 down to 1, 1 + 3 * 2^-8 up to 1 + 2^-6.
    assert Tensor.to_list(Tensor.as_type(b, {:f, 32})) == [1.0, 1.0, 1.0 + 4 * half, -2.5]
    assert Tensor.as_type(t, {:f, 32}) == t
    assert_raise ArgumentError, ~r/not supported/, fn -> Tensor.as_type(t, {:s, 32}) end
  end

  test "set_bf16_products takes a boolean and says whether the products are in use" do
    assert {:error, message} = Ssmkit.set_bf16_products(:yes)
    assert message =~ "expected true or false"
    on = Ssmkit.set_bf16_products(true)
    assert is_boolean(on) and Ssmkit.bf16_products() == on
    refute Ssmkit.set_bf16_products(false)
    refute Ssmkit.bf16_products()
  end

  test "the policy window with bf16 weights: exact with the products off, x's rounding on" do
    seed = seed!()
    Ssmkit.set_num_threads(2)
    on_exit(fn -> Ssmkit.set_num_threads(1) end)
    c = Policy.config()
    params = Policy.init(c, 3)
    x = randn({1, 60, c.d_in})
    bf16 = Policy.prepare(params, weights: :bf16)
    widened = widen(Policy.prepare(params), bf16)
    want = Policy.forward(widened, x, c)

    Ssmkit.set_bf16_products(false)
    assert_close(Policy.forward(bf16, x, c), want, 1.0e-5, "seed #{seed}: products off")

    if Ssmkit.set_bf16_products(true) do
      got = Policy.forward(bf16, x, c)
      # x rounded to bf16 (relative 2^-9 per element) before each of the six projections.
      err = rel_err(got, want)
      assert err != :infinity and err > 0.0 and err <= 1.0e-2, "seed #{seed}: error #{err}"
      assert Policy.forward(bf16, x, c, dirty: false) == got
      assert Policy.forward(bf16, x, c, dirty: true) == got
    end
  end

  test "prepare refuses an unknown weight type" do
    params =
      Policy.init(Policy.config(d_in: 3, d_model: 8, n_layers: 1, d_state: 2, dt_rank: 2), 0)

    assert_raise ArgumentError, ~r/expected :f32 or :bf16/, fn ->
      Policy.prepare(params, weights: :f16)
    end
  end

  # The f32 params with bf16's projection weights widened back to f32.
  defp widen(params, bf16) do
    f32 = &Tensor.as_type(&1, {:f, 32})
    keys = ~w(in_proj x_proj dt_proj out_proj)a

    %{
      params
      | embed: f32.(bf16.embed),
        head: f32.(bf16.head),
        layers:
          Enum.zip_with(params.layers, bf16.layers, fn p, b ->
            Enum.reduce(keys, p, fn k, acc -> Map.put(acc, k, f32.(Map.fetch!(b, k))) end)
          end)
    }
  end
end
