defmodule Ssmkit.ConcurrencyTest do
  # Many processes calling at once: ops on normal and dirty schedulers, each process checking
  # its results against the same call made alone; processes sharing one decode state (the
  # resource's mutex serialises them); several streams at once. Runs at 2 threads so the
  # library's worker pool is contended too (one call holds it, the others run on their callers).
  use ExUnit.Case, async: false
  import Ssmkit.TestHelpers
  alias Ssmkit.{Model, Ops, Policy, State, Tensor}

  setup do
    Ssmkit.set_num_threads(2)
    on_exit(fn -> Ssmkit.set_num_threads(1) end)
    %{seed: seed!()}
  end

  test "64 processes x 10 calls of scan, backward and linear agree with single calls", t do
    {b, d, l, n} = {2, 32, 40, 8}
    u = randn({b, d, l})
    delta = randn({b, d, l}, 0.5)
    a = Tensor.from_list(for(_ <- 1..(d * n), do: -:math.exp(:rand.normal() * 0.5)), {d, n})
    bm = randn({b, n, l})
    cm = randn({b, n, l})
    x = randn({64, 96})
    w = randn({80, 96})
    {:ok, scan} = Ops.selective_scan_fn(u, delta, a, bm, cm, delta_softplus: true)
    {:ok, grads} = Ops.selective_scan_bwd(u, delta, a, bm, cm, u, delta_softplus: true)
    {:ok, lin} = Ops.linear(x, w)

    tasks =
      for i <- 1..64 do
        Task.async(fn ->
          for j <- 1..10 do
            dirty = rem(i + j, 3) == 0

            {:ok, s} =
              Ops.selective_scan_fn(u, delta, a, bm, cm, delta_softplus: true, dirty: dirty)

            {:ok, g} =
              Ops.selective_scan_bwd(u, delta, a, bm, cm, u, delta_softplus: true, dirty: !dirty)

            {:ok, o} = Ops.linear(x, w, dirty: dirty)

            s.data == scan.data and g.du.data == grads.du.data and g.da.data == grads.da.data and
              o.data == lin.data
          end
        end)
      end

    results = Task.await_many(tasks, 300_000)

    assert Enum.all?(List.flatten(results)),
           "seed #{t.seed}: a concurrent call differed from the single one"
  end

  test "32 processes x 5 policy windows in one NIF call each agree with a single call", t do
    # Each dirty scheduler thread keeps its own workspace for the window: processes landing on
    # the same threads, and windows of different sizes in turn, must not see each other's.
    c = Policy.config(d_in: 19, d_model: 32, n_layers: 2, d_state: 8, dt_rank: 4, d_out: 6)
    params = Policy.prepare(Policy.init(c, 3))
    small = randn({1, 17, 19})
    large = randn({3, 41, 19})
    want_small = Policy.forward(params, small, c)
    want_large = Policy.forward(params, large, c)

    tasks =
      for i <- 1..32 do
        Task.async(fn ->
          for j <- 1..5 do
            if rem(i + j, 2) == 0 do
              Policy.forward(params, small, c).data == want_small.data
            else
              Policy.forward(params, large, c).data == want_large.data
            end
          end
        end)
      end

    assert Enum.all?(List.flatten(Task.await_many(tasks, 300_000))),
           "seed #{t.seed}: a concurrent window differed from the single one"
  end

  test "processes stepping one shared state are serialised, none lost", t do
    {b, d, n} = {1, 16, 4}
    {:ok, state} = State.new({b, d, n})
    x = randn({b, d})
    dt = randn({b, d}, 0.1)
    a = Tensor.from_list(List.duplicate(0.0, d * n), {d, n})
    # A = 0: each step adds dt * x * B to the state; with dt_softplus off and the same inputs
    # every step, N steps in any order give N times one step's increment.
    bm = Tensor.from_list(List.duplicate(1.0, b * n), {b, n})
    cm = bm

    tasks =
      for _ <- 1..16 do
        Task.async(fn ->
          for _ <- 1..25, do: {:ok, _} = Ops.selective_state_update(state, x, dt, a, bm, cm)
        end)
      end

    Task.await_many(tasks, 120_000)
    {:ok, after_all} = State.to_tensor(state)
    {:ok, one} = State.new({b, d, n})
    {:ok, _} = Ops.selective_state_update(one, x, dt, a, bm, cm)
    {:ok, step} = State.to_tensor(one)
    want = Tensor.from_list(Enum.map(Tensor.to_list(step), &(&1 * 400)), step.shape)
    assert_close(after_all, want, 1.0e-5, "400 steps from 16 processes (seed #{t.seed})")
  end

  test "eight streams at once each produce the greedy continuation" do
    {:ok, model} = Model.load_default()
    {:ok, alone} = Model.stream(model, "And God said", max_tokens: 12, ignore_eos: true)
    {:ok, %{tokens: want}} = Model.collect(alone)

    tasks =
      for _ <- 1..8 do
        Task.async(fn ->
          {:ok, s} = Model.stream(model, "And God said", max_tokens: 12, ignore_eos: true)
          {:ok, %{tokens: tokens}} = Model.collect(s, timeout: 120_000)
          tokens
        end)
      end

    assert Task.await_many(tasks, 150_000) == List.duplicate(want, 8)
  end
end
