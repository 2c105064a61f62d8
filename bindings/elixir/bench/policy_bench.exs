# The `policy` network from Elixir (docs/targets.md: input 287 -> d_model 256, two Mamba-1
# layers, D 512, N 16, dt_rank 16, conv 4, 16 outputs): per-call latency of one inference over
# a 60-frame window (B = 1) in one NIF call (on a dirty scheduler and on the caller's; f32, and
# bf16 weights with the bf16 products) and one op NIF at a time, of one frame through the
# decode states, and of one training step at
# B = 256 (forward + backward through the ops, Adam in Elixir), each the median of many calls
# timed one by one, with the load average beside it.
#
#   cd bindings/elixir && mix run bench/policy_bench.exs [--threads 2] [--runs 300]
#       [--train-steps 5] [--batch 256] [--json]
#
# Needs the NIF built (mix compile, PKG_CONFIG_PATH naming an installed ssmkit).
alias Ssmkit.{Adam, Policy, Tensor}

{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [
      threads: :integer,
      runs: :integer,
      train_steps: :integer,
      batch: :integer,
      json: :boolean
    ]
  )

threads = Keyword.get(opts, :threads, 2)
runs = Keyword.get(opts, :runs, 300)
train_steps = Keyword.get(opts, :train_steps, 5)
batch = Keyword.get(opts, :batch, 256)
Ssmkit.set_num_threads(threads)

load = fn -> File.read!("/proc/loadavg") |> String.split() |> hd() end

cpu =
  File.read!("/proc/cpuinfo")
  |> String.split("\n")
  |> Enum.find_value("unknown", fn l ->
    if l =~ ~r/^model name/, do: l |> String.split(": ") |> List.last()
  end)

flags = File.read!("/proc/cpuinfo") |> String.split("\n") |> Enum.find(&(&1 =~ ~r/^flags/))
simd = if flags =~ " avx512f", do: "AVX-512", else: if(flags =~ " avx2", do: "AVX2", else: "SSE")

randn = fn shape ->
  Tensor.from_list(for(_ <- 1..Tensor.size(shape), do: :rand.normal()), shape)
end

# Median, 10th and 90th percentiles of a list of microseconds, in ms.
stats = fn us ->
  s = Enum.sort(us)
  n = length(s)
  pick = fn q -> Enum.at(s, min(n - 1, trunc(q * n))) / 1000 end
  %{median_ms: pick.(0.5), p10_ms: pick.(0.1), p90_ms: pick.(0.9), min_ms: hd(s) / 1000, calls: n}
end

# Wall microseconds of each call; and the process CPU time (every thread: schedulers, dirty
# schedulers, the library's workers) per call, in ms, which a machine shared with other work inflates
# far less than the wall time.
cpu_ms = fn -> elem(:erlang.statistics(:runtime), 0) end

time_calls = fn n, fun ->
  for _ <- 1..n do
    {us, _} = :timer.tc(fun)
    us
  end
end

with_cpu = fn n, fun ->
  c0 = cpu_ms.()
  us = time_calls.(n, fun)
  {us, (cpu_ms.() - c0) / n}
end

:rand.seed(:exsss, {1, 2, 3})
c = Policy.config()
params = Policy.init(c, 0)
ready = Policy.prepare(params)

# `warm` untimed calls, then the stats of n timed ones with their CPU time per call.
timed = fn fun, warm, n ->
  _ = time_calls.(warm, fun)
  {us, cpu} = with_cpu.(n, fun)
  Map.put(stats.(us), :cpu_ms, cpu)
end

# One window, B = 1, L = 60.
x1 = randn.({1, 60, c.d_in})
load_before = load.()
window = timed.(fn -> Policy.forward(ready, x1, c) end, 30, runs)

# The window on this process's scheduler (dirty: false) rather than a dirty one; and with the
# projections' weights in bf16 and the bf16 products on (AMX's bf16 tiles where the CPU has
# them), both ways.
window_caller = timed.(fn -> Policy.forward(ready, x1, c, dirty: false) end, 30, runs)
bf16_ready = Policy.prepare(params, weights: :bf16)
bf16_products = Ssmkit.set_bf16_products(true)
window_bf16 = timed.(fn -> Policy.forward(bf16_ready, x1, c, dirty: true) end, 30, runs)
window_bf16_caller = timed.(fn -> Policy.forward(bf16_ready, x1, c, dirty: false) end, 30, runs)
Ssmkit.set_bf16_products(false)

# The same window one op NIF at a time (what forward/3 was before it ran in one call).
window_ops = timed.(fn -> Policy.forward_ops(ready, x1, c) end, 30, runs)

# One frame through the decode states (a game loop's per-frame call).
states = Policy.init_state(ready, 1)
frame = randn.({1, c.d_in})
step = timed.(fn -> Policy.step(ready, states, frame, c) end, 60, runs * 4)

# Training at B = batch: forward + backward (the ops), then Adam (Elixir), timed apart.
xb = randn.({batch, 60, c.d_in})
target = randn.({batch, 60, c.d_out})
adam = Adam.init(params)
{_, warm_grads} = Policy.loss_and_grad(params, xb, target, c)
_ = Adam.update(params, warm_grads, adam)

cpu_train = cpu_ms.()

{fb, ad, losses} =
  Enum.reduce(1..train_steps, {[], [], []}, fn _, {fb, ad, losses} ->
    {us_fb, {loss, grads}} = :timer.tc(fn -> Policy.loss_and_grad(params, xb, target, c) end)
    {us_ad, _} = :timer.tc(fn -> Adam.update(params, grads, adam) end)
    {[us_fb | fb], [us_ad | ad], [loss | losses]}
  end)

train_cpu = (cpu_ms.() - cpu_train) / train_steps

total = Enum.zip_with(fb, ad, &(&1 + &2))
load_after = load.()

# Multiply-adds of one window's forward: every weight once per frame (the parameters, less the
# norms, biases and the scan's own work, which is small beside them).
macs =
  60 * (c.d_in * c.d_model + c.d_model * c.d_out) +
    c.n_layers * 60 *
      (c.d_model * 2 * c.expand * c.d_model + c.expand * c.d_model * (c.dt_rank + 2 * c.d_state) +
         c.dt_rank * c.expand * c.d_model + c.expand * c.d_model * c.d_model)

result = %{
  cpu: cpu,
  simd: simd,
  threads: threads,
  load_before: load_before,
  load_after: load_after,
  window_b1_l60: window,
  window_gflops: 2 * macs / (window.median_ms * 1.0e6),
  window_caller_scheduler: window_caller,
  bf16_products: bf16_products,
  window_bf16: window_bf16,
  window_bf16_caller_scheduler: window_bf16_caller,
  window_ops_b1_l60: window_ops,
  frame_step: step,
  train_step: %{
    batch: batch,
    fwd_bwd: stats.(fb),
    adam: stats.(ad),
    total: stats.(total),
    cpu_ms: train_cpu,
    losses: Enum.reverse(losses)
  }
}

if opts[:json] do
  IO.puts(inspect(result, limit: :infinity, pretty: true))
else
  IO.puts(
    "policy from Elixir: #{cpu} (#{simd}), #{threads} threads, load #{load_before} -> #{load_after}"
  )

  IO.puts(
    "  window B=1 L=60 forward: median #{Float.round(window.median_ms, 3)} ms " <>
      "(p10 #{Float.round(window.p10_ms, 3)}, p90 #{Float.round(window.p90_ms, 3)}, " <>
      "#{window.calls} calls), #{Float.round(result.window_gflops, 1)} GFLOP/s; " <>
      "cpu #{Float.round(window.cpu_ms, 3)} ms per call"
  )

  line = fn what, w ->
    IO.puts(
      "  #{what}: median #{Float.round(w.median_ms, 3)} ms (p10 #{Float.round(w.p10_ms, 3)}, " <>
        "p90 #{Float.round(w.p90_ms, 3)}); cpu #{Float.round(w.cpu_ms, 3)} ms per call"
    )
  end

  line.("the same window on the caller's scheduler (dirty: false)", window_caller)

  if bf16_products do
    line.("the window with bf16 weights and products, dirty scheduler", window_bf16)
    line.("the window with bf16 weights and products, caller's scheduler", window_bf16_caller)
  else
    IO.puts("  (no AVX-512 BF16 here: the bf16 windows ran with the products off)")
  end

  line.("the same window one op NIF at a time", window_ops)

  IO.puts(
    "  one frame (decode states): median #{Float.round(step.median_ms, 4)} ms " <>
      "(p10 #{Float.round(step.p10_ms, 4)}, p90 #{Float.round(step.p90_ms, 4)}); " <>
      "cpu #{Float.round(step.cpu_ms, 4)} ms per call"
  )

  t = result.train_step

  IO.puts(
    "  train step B=#{batch}: median #{Float.round(t.total.median_ms, 1)} ms " <>
      "(forward+backward #{Float.round(t.fwd_bwd.median_ms, 1)}, Adam #{Float.round(t.adam.median_ms, 1)}; " <>
      "#{t.total.calls} steps); cpu #{Float.round(t.cpu_ms, 1)} ms per step"
  )
end
