defmodule Ssmkit.PolicyTest do
  # The policy network from Elixir: its forward, loss and every parameter's gradient against
  # the pure-JAX references in float64 (test/fixtures/policy.exs, an oracle independent of
  # ssmkit), the gradient along random directions against central finite differences, one frame
  # at a time equal to the window, and training steps that lower the loss.
  use ExUnit.Case, async: true
  import Ssmkit.TestHelpers
  alias Ssmkit.{Adam, Policy, Tensor}

  @case fixture("policy")["small"]
  @config Policy.config(d_in: 7, d_model: 16, n_layers: 2, d_state: 4, dt_rank: 3, d_out: 5)

  # The fixture's flat names ("param.layers.0.in_proj") as the params structure.
  defp tree(prefix) do
    get = fn name -> Map.fetch!(@case, prefix <> name) end
    layer_keys = ~w(norm in_proj conv_w conv_b x_proj dt_proj dt_bias a_log d out_proj)a

    %{
      embed: get.("embed"),
      norm_f: get.("norm_f"),
      head: get.("head"),
      layers:
        for i <- 0..(@config.n_layers - 1) do
          Map.new(layer_keys, fn k -> {k, get.("layers.#{i}.#{k}")} end)
        end
    }
  end

  defp leaves(%Tensor{} = t, path), do: [{path, t}]

  defp leaves(list, path) when is_list(list),
    do: list |> Enum.with_index() |> Enum.flat_map(fn {v, i} -> leaves(v, "#{path}.#{i}") end)

  defp leaves(%{} = m, path),
    do: m |> Enum.sort() |> Enum.flat_map(fn {k, v} -> leaves(v, "#{path}.#{k}") end)

  test "forward, loss and every gradient match the float64 JAX reference" do
    params = tree("param.")
    out = Policy.forward(params, @case["x"], @config)
    assert_close(out, @case["out"], 1.0e-5, "forward")
    {loss, grads} = Policy.loss_and_grad(params, @case["x"], @case["target"], @config)
    [want_loss] = Tensor.to_list(@case["loss"])
    assert abs(loss - want_loss) <= 1.0e-5 * abs(want_loss)

    want = Map.new(leaves(tree("grad."), "grad"))

    for {path, g} <- leaves(grads, "grad") do
      assert_close(g, Map.fetch!(want, path), 1.0e-4, path)
    end

    assert length(leaves(grads, "grad")) == map_size(want)
  end

  test "the gradient along random directions equals central finite differences" do
    seed = seed!()
    params = tree("param.")
    {_, grads} = Policy.loss_and_grad(params, @case["x"], @case["target"], @config)

    for _ <- 1..3 do
      dir = Adam.map_leaves(params, fn t -> randn(t.shape) end)
      shift = fn h -> combine(params, dir, fn p, d -> p + h * d end) end
      # Every one of the ~4,000 parameters moves: a small step keeps the third-order term of
      # the central difference below the f32 rounding of the loss.
      h = 1.0e-3
      {plus, _} = Policy.loss_and_grad(shift.(h), @case["x"], @case["target"], @config)
      {minus, _} = Policy.loss_and_grad(shift.(-h), @case["x"], @case["target"], @config)
      fd = (plus - minus) / (2 * h)

      pairs = Enum.zip_with(leaves(grads, ""), leaves(dir, ""), fn {_, g}, {_, d} -> {g, d} end)
      analytic = pairs |> Enum.map(fn {g, d} -> dot(g, d) end) |> Enum.sum()
      # Terms of both signs can cancel in <grad, v>: the error is measured against a twentieth
      # of the sum of their sizes at least (a gradient wired to the wrong parameter misses by
      # all of it), as tests/capi/capi_c11_test.c does.
      mass = pairs |> Enum.map(fn {g, d} -> abs_dot(g, d) end) |> Enum.sum()
      scale = Enum.max([abs(analytic), abs(fd), 0.05 * mass])

      assert abs(fd - analytic) <= 2.0e-3 * scale,
             "seed #{seed}: <grad, v> #{analytic}, finite difference #{fd}"
    end
  end

  test "one frame at a time on resource states equals the window forward" do
    params = Policy.prepare(tree("param."))
    x = @case["x"]
    {b, l, d_in} = x.shape
    want = Policy.forward(params, x, @config)
    states = Policy.init_state(params, b)

    frames =
      for t <- 0..(l - 1) do
        rows = for bi <- 0..(b - 1), do: binary_part(x.data, (bi * l + t) * d_in * 4, d_in * 4)

        Policy.step(
          params,
          states,
          Tensor.new(IO.iodata_to_binary(rows), {:f, 32}, {b, d_in}),
          @config
        )
      end

    d_out = @config.d_out
    per_frame = Enum.map(frames, & &1.data)
    rows = for bi <- 0..(b - 1), f <- per_frame, do: binary_part(f, bi * d_out * 4, d_out * 4)
    got = Tensor.new(IO.iodata_to_binary(rows), {:f, 32}, {b, l, d_out})
    assert_close(got, want, 1.0e-5, "steps vs window")
  end

  test "the window in one NIF call equals the window one op at a time" do
    # Sizes away from the fixture's: three layers, D = 96 (no whole vector multiple), K = 3.
    c =
      Policy.config(
        d_in: 37,
        d_model: 48,
        n_layers: 3,
        d_state: 8,
        dt_rank: 5,
        d_out: 7,
        d_conv: 3
      )

    params = Policy.init(c, 11)
    x = randn({3, 23, 37})
    assert_close(Policy.forward(params, x, c), Policy.forward_ops(params, x, c), 1.0e-5, "fused")

    assert_close(
      Policy.forward(Policy.prepare(params), x, c),
      Policy.forward_ops(params, x, c),
      1.0e-5,
      "prepared"
    )
  end

  test "the one-call window refuses bad parameters with the op's message" do
    params = tree("param.")
    x = @case["x"]

    bad = fn layer_key, value ->
      update_in(params.layers, &List.update_at(&1, 1, fn p -> Map.put(p, layer_key, value) end))
    end

    assert_raise ArgumentError,
                 ~r/layers\[1\]\.mixer: mamba1_mixer: x_proj: expected R \+ 2N rows/,
                 fn ->
                   Policy.forward(bad.(:x_proj, randn({4, 32})), x, @config)
                 end

    assert_raise ArgumentError,
                 ~r/layers\[1\]\.mixer: mamba1_mixer: conv_weight: expected shape \(D, K\)/,
                 fn ->
                   Policy.forward(bad.(:conv_w, randn({31, 4})), x, @config)
                 end

    assert_raise ArgumentError,
                 ~r/layers\[1\]\.mixer: mamba1_mixer: out_proj: expected shape \(d, D\)/,
                 fn ->
                   Policy.forward(bad.(:out_proj, randn({16, 33})), x, @config)
                 end

    assert_raise ArgumentError, ~r/layers\[1\]\.dt_bias: expected a tensor/, fn ->
      Policy.forward(
        update_in(params.layers, &List.update_at(&1, 1, fn p -> Map.delete(p, :dt_bias) end)),
        x,
        @config
      )
    end

    assert_raise ArgumentError, ~r/x: expected an f32 tensor \(B, L, inputs\)/, fn ->
      Policy.forward(
        params,
        Tensor.reshape(x, {elem(x.shape, 0) * elem(x.shape, 1), elem(x.shape, 2)}),
        @config
      )
    end

    assert_raise ArgumentError, ~r/embed: .*bytes/, fn ->
      Policy.forward(
        %{params | embed: %{params.embed | data: binary_part(params.embed.data, 0, 8)}},
        x,
        @config
      )
    end
  end

  test "Adam steps lower the loss on a fixed batch" do
    params = tree("param.")
    adam = Adam.init(params, lr: 1.0e-2)

    {losses, _, _} =
      Enum.reduce(1..8, {[], params, adam}, fn _, {losses, p, a} ->
        {loss, p, a} = Policy.train_step(p, a, @case["x"], @case["target"], @config)
        {[loss | losses], p, a}
      end)

    [last | _] = losses
    first = List.last(losses)
    assert last < 0.9 * first, "losses #{inspect(Enum.reverse(losses))}"
  end

  test "Adam's update is the formula, step by step" do
    p0 = [1.0, -2.0, 0.5]
    g = [0.1, -0.3, 2.0]
    {lr, b1, b2, eps} = {0.1, 0.9, 0.999, 1.0e-8}
    adam = Adam.init(%{w: Tensor.from_list(p0, {3})}, lr: lr)

    {%{w: p1}, adam} =
      Adam.update(%{w: Tensor.from_list(p0, {3})}, %{w: Tensor.from_list(g, {3})}, adam)

    {%{w: p2}, _} = Adam.update(%{w: p1}, %{w: Tensor.from_list(g, {3})}, adam)

    want =
      Enum.zip(p0, g)
      |> Enum.map(fn {p, gi} ->
        {p, _, _} =
          Enum.reduce(1..2, {p, 0.0, 0.0}, fn t, {p, m, v} ->
            m = b1 * m + (1 - b1) * gi
            v = b2 * v + (1 - b2) * gi * gi
            step = lr * :math.sqrt(1 - :math.pow(b2, t)) / (1 - :math.pow(b1, t))
            {p - step * m / (:math.sqrt(v) + eps), m, v}
          end)

        p
      end)

    for {got, w} <- Enum.zip(Tensor.to_list(p2), want), do: assert_in_delta(got, w, 1.0e-6)
  end

  defp abs_dot(a, b),
    do: Enum.zip_with(Tensor.to_list(a), Tensor.to_list(b), &abs(&1 * &2)) |> Enum.sum()

  defp dot(a, b),
    do:
      Enum.zip(Tensor.to_list(a), Tensor.to_list(b))
      |> Enum.map(fn {x, y} -> x * y end)
      |> Enum.sum()

  defp combine(%Tensor{} = a, %Tensor{} = b, fun) do
    Tensor.from_list(Enum.zip_with(Tensor.to_list(a), Tensor.to_list(b), fun), a.shape)
  end

  defp combine(a, b, fun) when is_list(a), do: Enum.zip_with(a, b, &combine(&1, &2, fun))

  defp combine(%{} = a, b, fun),
    do: Map.new(a, fn {k, v} -> {k, combine(v, Map.fetch!(b, k), fun)} end)
end
