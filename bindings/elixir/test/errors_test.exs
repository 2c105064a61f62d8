defmodule Ssmkit.ErrorsTest do
  # Bad input from Elixir gets {:error, message} naming the argument, the expected and the
  # given, and never crashes the VM: wrong binary sizes, shapes, types, non-tensors, missing
  # arguments, released or foreign resources, and a randomized sweep of malformed arguments
  # over every NIF (the NIF's term parser is this package's parser of outside input).
  use ExUnit.Case, async: true
  import Bitwise
  import Ssmkit.TestHelpers
  alias Ssmkit.{NIF, Ops, State, Tensor}

  setup do
    seed = seed!()
    u = randn({2, 8, 12})
    delta = randn({2, 8, 12})
    a = randn({8, 4})
    b = randn({2, 4, 12})
    c = randn({2, 4, 12})
    %{seed: seed, u: u, delta: delta, a: a, b: b, c: c}
  end

  defp assert_error(result, fragments) do
    assert {:error, message} = result
    assert is_binary(message)
    for f <- fragments, do: assert(message =~ f, "#{inspect(f)} not in #{inspect(message)}")
    message
  end

  test "a binary of the wrong size", t do
    short = %{t.c | data: binary_part(t.c.data, 0, byte_size(t.c.data) - 4)}

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, short), [
      "selective_scan_fwd: c: expected 384 bytes for shape {2, 4, 12} of type {:f, 32}, given 380"
    ])
  end

  test "a shape the op refuses (the C ABI's message)", t do
    wrong = Tensor.reshape(t.c, {2, 12, 4})

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, wrong), [
      "selective_scan",
      "C",
      "(B, N, L)",
      "given"
    ])

    assert_error(Ops.linear(randn({3, 5}), randn({4, 6})), [
      "linear",
      "x",
      "(T, K)",
      "(3, 6)",
      "(3, 5)"
    ])
  end

  test "a type Nx has but the C ABI does not, and one Nx does not have", t do
    f64 = Tensor.new(:binary.copy(<<0::64>>, 2 * 8 * 12), {:f, 64}, {2, 8, 12})

    assert_error(Ops.selective_scan_fn(f64, t.delta, t.a, t.b, t.c), [
      "u: expected type {:f, 32}, {:bf, 16}",
      "{f,64}"
    ])

    bogus = {t.u.data, {:q, 7}, t.u.shape}
    assert_error(Ops.selective_scan_fn(bogus, t.delta, t.a, t.b, t.c), ["u: expected type"])
  end

  test "a type the op refuses (the C ABI's message)", t do
    ints = Tensor.new(t.a.data, {:s, 32}, t.a.shape)

    assert_error(Ops.selective_scan_fn(t.u, t.delta, ints, t.b, t.c), [
      "selective_scan",
      "A",
      "f32",
      "i32"
    ])
  end

  test "a missing argument and things that are not tensors", t do
    assert_error(Ops.selective_scan_fn(t.u, t.delta, nil, t.b, t.c), ["A", "null"])

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, :c), [
      "c: expected a tensor {data, type, shape}"
    ])

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, {[1, 2], {:f, 32}, {2}}), [
      "c: expected a binary"
    ])

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, {"", {:f, 32}, {1, -1}}), [
      "c: expected a shape tuple"
    ])

    assert_error(
      Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, {"", {:f, 32}, {1, 1, 1, 1, 1, 1, 0}}),
      ["at most 6"]
    )

    huge = {"", {:f, 32}, {1 <<< 40, 1 <<< 40}}
    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, huge), ["too large"])

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, t.c, delta_softplus: 1), [
      "delta_softplus: expected true or false"
    ])

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, t.c, algorithm: :bogus), [
      "algorithm"
    ])

    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, t.c, algorithm: 99), ["algorithm"])
    assert_error(NIF.selective_scan_fwd(:not_a_map), ["arguments: expected a map"])
  end

  test "a state asked for that the inputs cannot size", t do
    assert_error(Ops.selective_scan_fn(t.u, t.delta, t.a, t.b, t.c, return_varlen_states: true), [
      "cu_seqlens"
    ])
  end

  test "a released state, a state of the wrong shape, something that is not a state", t do
    {:ok, state} = State.new({2, 8, 4})
    x = randn({2, 8})
    dt = randn({2, 8})
    bs = randn({2, 4})
    assert {:ok, _} = Ops.selective_state_update(state, x, dt, t.a, bs, bs)
    assert :ok = State.release(state)
    assert :ok = State.release(state)
    assert_error(Ops.selective_state_update(state, x, dt, t.a, bs, bs), ["state: released"])
    assert_error(State.to_tensor(state), ["released"])
    {:ok, small} = State.new({2, 8, 3})
    assert_error(Ops.selective_state_update(small, x, dt, t.a, bs, bs), ["state"])
    assert_error(Ops.selective_state_update(make_ref(), x, dt, t.a, bs, bs), ["expected a state"])
    assert_error(State.new({0, 3}), ["sizes >= 1"])
    assert_error(State.new(:nope), ["shape"])
    assert_error(State.from_tensor(Tensor.from_list([1, 2], {2}, {:s, 32})), ["{:f, 32}"])
  end

  test "a failed call releases the outputs it had allocated" do
    # out is allocated (8 MB) before the C ABI refuses c; 100 leaked outputs would be 800 MB.
    u = Tensor.zeros({2, 1024, 1024})
    a = randn({1024, 4})
    bc = randn({2, 4, 1024})
    wrong = Tensor.reshape(bc, {2, 1024, 4})
    :erlang.garbage_collect()
    before = :erlang.memory(:binary)
    for _ <- 1..100, do: {:error, _} = Ops.selective_scan_fn(u, u, a, bc, wrong, dirty: false)
    :erlang.garbage_collect()
    assert :erlang.memory(:binary) - before < 100_000_000
  end

  # Malformed arguments drawn at random for every NIF: each call must return (an error or a
  # result), never crash or hang the VM. Seeded; the seed is in the failure message.
  test "random malformed arguments to every NIF", t do
    good = %{
      u: Tensor.to_nif(t.u),
      delta: Tensor.to_nif(t.delta),
      a: Tensor.to_nif(t.a),
      b: Tensor.to_nif(t.b),
      c: Tensor.to_nif(t.c),
      x: Tensor.to_nif(randn({6, 16})),
      weight: Tensor.to_nif(randn({16}))
    }

    {:ok, state} = State.new({2, 8, 4})

    calls = [
      {:selective_scan_fwd, 1},
      {:selective_scan_bwd, 1},
      {:ssd_fwd, 1},
      {:ssd_bwd, 1},
      {:causal_conv1d_fwd, 1},
      {:causal_conv1d_bwd, 1},
      {:rmsnorm_fwd, 1},
      {:rmsnorm_bwd, 1},
      {:add_rmsnorm_fwd, 1},
      {:add_rmsnorm_bwd, 1},
      {:linear_fwd, 1},
      {:linear_bwd, 1}
    ]

    for i <- 1..400 do
      {fun, _} = Enum.random(calls)
      args = mutate(good, i)
      result = apply(NIF, fun, [args])

      assert match?({:ok, _}, result) or match?({:error, _}, result),
             "seed #{t.seed}: #{inspect(result)}"
    end

    for _ <- 1..100 do
      for fun <- [:selective_state_update, :causal_conv1d_update] do
        result = apply(NIF, fun, [Enum.random([state, make_ref(), :x, 1]), mutate(good, 0)])
        assert match?({:ok, _}, result) or match?({:error, _}, result), "seed #{t.seed}"
      end
    end

    for {layout, arity} <- [tokens_to_channels: 2, channels_to_tokens: 1, add: 2] do
      for _ <- 1..50 do
        args = for _ <- 1..arity, do: junk()
        result = apply(NIF, layout, args)
        assert match?({:ok, _}, result) or match?({:error, _}, result), "seed #{t.seed}"
      end
    end
  end

  # The good arguments with one or two of them replaced by junk, or their shapes shuffled.
  defp mutate(good, i) do
    keys = Map.keys(good) ++ [:d, :z, :dout, :weight, :bias, :delta_softplus, :eps, :algorithm]

    Enum.reduce(1..(1 + rem(i, 2)), good, fn _, acc ->
      key = Enum.random(keys)

      case :rand.uniform(4) do
        1 -> Map.put(acc, key, junk())
        2 -> Map.update(acc, key, junk(), &reshape_junk/1)
        3 -> Map.delete(acc, key)
        4 -> Map.put(acc, key, Enum.random(Map.values(good)))
      end
    end)
  end

  defp reshape_junk({data, type, shape}) when is_binary(data) and is_tuple(shape) do
    dims = shape |> Tuple.to_list() |> Enum.shuffle()
    {data, type, List.to_tuple(dims ++ Enum.take([1, 2, 0], :rand.uniform(3) - 1))}
  end

  defp reshape_junk(other), do: other

  defp junk do
    Enum.random([
      nil,
      :atom,
      -1,
      1.5,
      "bytes",
      <<1, 2, 3>>,
      [],
      [1, 2],
      {},
      {<<0::32>>},
      {<<0::32>>, {:f, 32}},
      {<<0::32>>, {:f, 32}, {1}},
      {<<0::32>>, {:f, 32}, {2}},
      {<<0::32>>, {:s, 32}, {1}},
      {<<0::31>>, {:f, 32}, {1}},
      {<<0::64>>, {:bf, 16}, {2, 2}},
      {<<>>, {:f, 32}, {0}},
      {<<>>, {:f, 32}, {0, 5}},
      {:binary.copy(<<0>>, 4096), {:f, 32}, {16, 8, 8}},
      {<<0::32>>, :f32, {1}},
      {<<0::32>>, {:f, 32}, [1]},
      {<<0::32>>, {:f, 32}, {1.0}},
      {<<0::32>>, {:f, 32}, {1 <<< 62}},
      {<<0::32>>, {:f, 32}, {-4}},
      make_ref(),
      self()
    ])
  end
end
