defmodule Ssmkit.DecodeTest do
  # A decode loop equals the prefill: L steps of selective_state_update and causal_conv1d_update
  # on states held in resources give the scan's and the convolution's outputs position by
  # position, and their final states.
  use ExUnit.Case, async: true
  import Ssmkit.TestHelpers
  alias Ssmkit.{Layout, Ops, State, Tensor}

  setup do
    %{seed: seed!()}
  end

  # Position l of a (B, F, L) tensor as (B, F).
  defp at(%Tensor{shape: {b, f, l}} = t, pos) do
    {:ok, tokens} = Layout.channels_to_tokens([t])
    rows = for bi <- 0..(b - 1), do: binary_part(tokens.data, (bi * l + pos) * f * 4, f * 4)
    Tensor.new(IO.iodata_to_binary(rows), {:f, 32}, {b, f})
  end

  # Steps (B, F) x L stacked as (B, F, L).
  defp stack(steps) do
    [first | _] = steps
    {b, f} = first.shape
    joined = Enum.map(steps, &Tensor.reshape(&1, {b, 1, f})) |> Enum.map(& &1.data)

    rows = for bi <- 0..(b - 1), s <- joined, do: binary_part(s, bi * f * 4, f * 4)

    {:ok, [t]} =
      Layout.tokens_to_channels(
        Tensor.new(IO.iodata_to_binary(rows), {:f, 32}, {b, length(steps), f}),
        [f]
      )

    t
  end

  test "Mamba-1: L decode steps equal the scan, and the state its last state", t do
    {b, d, l, n} = {2, 16, 24, 8}
    u = randn({b, d, l})
    delta = randn({b, d, l}, 0.5)
    a = Tensor.from_list(for(_ <- 1..(d * n), do: -:math.exp(:rand.normal() * 0.5)), {d, n})
    bm = randn({b, n, l})
    cm = randn({b, n, l})
    dd = randn({d})
    z = randn({b, d, l})
    bias = randn({d}, 0.3)
    opts = [d: dd, z: z, delta_bias: bias, delta_softplus: true, return_last_state: true]
    {:ok, {want, last}} = Ops.selective_scan_fn(u, delta, a, bm, cm, opts)

    {:ok, state} = State.new({b, d, n})

    outs =
      for pos <- 0..(l - 1) do
        {:ok, y} =
          Ops.selective_state_update(
            state,
            at(u, pos),
            at(delta, pos),
            a,
            at(bm, pos),
            at(cm, pos),
            d: dd,
            z: at(z, pos),
            dt_bias: bias,
            dt_softplus: true
          )

        y
      end

    assert_close(stack(outs), want, 2.0e-5, "steps vs scan (seed #{t.seed})")
    {:ok, final} = State.to_tensor(state)
    assert_close(final, last, 2.0e-5, "state vs last_state (seed #{t.seed})")
  end

  test "causal conv: L update steps equal the convolution", t do
    {b, d, l, k} = {2, 16, 20, 4}
    x = randn({b, d, l})
    w = randn({d, k}, 0.5)
    bias = randn({d})

    {:ok, {want, final}} =
      Ops.causal_conv1d_fn(x, w, bias: bias, activation: :silu, return_final_states: true)

    {:ok, state} = State.new({b, d, k - 1})

    outs =
      for pos <- 0..(l - 1) do
        {:ok, y} = Ops.causal_conv1d_update(state, at(x, pos), w, bias: bias, activation: :silu)
        y
      end

    assert_close(stack(outs), want, 1.0e-6, "conv steps (seed #{t.seed})")
    {:ok, got_state} = State.to_tensor(state)
    assert_close(got_state, final, 0.0, "conv state")
  end

  test "the garbage collector frees states" do
    before = Ssmkit.NIF.live_counts().states

    pid =
      spawn(fn ->
        for _ <- 1..50, do: {:ok, _} = State.new({4, 64, 16})
        receive do: (:stop -> :ok)
      end)

    ref = Process.monitor(pid)
    send(pid, :stop)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}
    :erlang.garbage_collect()
    wait_until(fn -> Ssmkit.NIF.live_counts().states <= before end)
  end

  defp wait_until(fun, tries \\ 1500) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("condition not met")
      true -> Process.sleep(20) && wait_until(fun, tries - 1)
    end
  end
end
