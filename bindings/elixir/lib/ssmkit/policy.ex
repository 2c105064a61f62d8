defmodule Ssmkit.Policy do
  @moduledoc """
  The `policy` network of docs/targets.md, from Elixir over the NIF: a game AI's Mamba policy
  that reads a window of frames and acts on every one.

      x (B, L, d_in) -> embed -> n_layers x [add + RMSNorm -> Mamba-1 mixer] -> add + RMSNorm
      -> head (B, L, d_out)

      mixer: in_proj -> (x, z); causal conv1d (silu) on x; x_proj -> (dt, B, C); dt_proj;
             selective scan with D, the z gate, dt_bias as delta_bias and softplus; out_proj

  The same network as `python/tests/mamba_model.py` (the JAX training benchmark's), with the
  defaults of docs/targets.md: d_in 287, d_model 256, 2 layers, expand 2 (D = 512), N = 16,
  dt_rank 16, conv width 4, 16 outputs, RMSNorm eps 1e-5; weights in PyTorch's (out, in)
  layout.

    * `forward/3`: one inference over a window in one NIF call (c_src/nif_net.c runs the ops of
      the C ABI back to back on buffers it keeps);
    * `forward_ops/3`: the same window one op NIF at a time (the projections are
      `Ssmkit.Ops.linear/3`, the conv, scan and norms the fused ops; `Ssmkit.Layout` moves
      between the token-major rows of the projections and the channel-major (B, D, L) of the
      conv and scan), as the training step runs it;
    * `loss_and_grad/3`: the mean-squared error and the gradient of every parameter, by the
      ops' backward functions in reverse order;
    * `train_step/4`: one step with `Ssmkit.Adam` (written in Elixir);
    * `init_state/2` and `step/3`: one frame at a time, the conv and SSM states held in
      `Ssmkit.State` resources updated in place (the game loop); 60 steps equal `forward/3`
      on the 60-frame window.

  Functions raise `ArgumentError` with the op's message when an op refuses its arguments.

  Dimension legend: B batch, L frames, F = d_model, D = d_inner, N state size, R dt_rank,
  K conv width, O outputs.
  """

  alias Ssmkit.{Adam, Layout, NIF, Ops, State, Tensor}
  alias Ssmkit.Policy.Elementwise

  defstruct d_in: 287,
            d_model: 256,
            n_layers: 2,
            expand: 2,
            d_state: 16,
            dt_rank: 16,
            d_conv: 4,
            d_out: 16,
            eps: 1.0e-5

  @type t :: %__MODULE__{}
  @typedoc "Parameters: %{embed, layers: [%{norm, in_proj, conv_w, conv_b, x_proj, dt_proj, dt_bias, a_log, d, out_proj}], norm_f, head}"
  @type params :: map

  @doc "A configuration: the docs/targets.md `policy` shape, with any field overridden."
  @spec config(keyword) :: t
  def config(opts \\ []), do: struct!(__MODULE__, opts)

  @doc """
  Parameters drawn as `mamba_model.py` draws them (Gaussian projections scaled by
  1/sqrt(fan_in), dt_bias the inverse softplus of dt in [1e-3, 0.1] log-uniform, A_log =
  log(1..N), D = 1, norms 1), from `:rand` seeded with `seed`.
  """
  @spec init(t, integer) :: params
  def init(%__MODULE__{} = c, seed \\ 0) do
    :rand.seed(:exsss, {seed, 17, 42})
    di = c.expand * c.d_model

    layer = fn ->
      %{
        norm: ones(c.d_model),
        in_proj: dense(2 * di, c.d_model),
        conv_w: dense(di, c.d_conv),
        conv_b: Tensor.zeros({di}),
        x_proj: dense(c.dt_rank + 2 * c.d_state, di),
        dt_proj: dense(di, c.dt_rank),
        dt_bias: dt_bias(di),
        a_log:
          Tensor.from_list(
            for(_ <- 1..di, n <- 1..c.d_state, do: :math.log(n)),
            {di, c.d_state}
          ),
        d: ones(di),
        out_proj: dense(c.d_model, di)
      }
    end

    %{
      embed: dense(c.d_model, c.d_in),
      layers: for(_ <- 1..c.n_layers, do: layer.()),
      norm_f: ones(c.d_model),
      head: dense(c.d_out, c.d_model)
    }
  end

  defp ones(n), do: Tensor.from_list(List.duplicate(1.0, n), {n})

  # (out, in) with entries N(0, 1) / sqrt(in).
  defp dense(rows, cols) do
    scale = 1.0 / :math.sqrt(cols)
    Tensor.from_list(for(_ <- 1..(rows * cols), do: :rand.normal() * scale), {rows, cols})
  end

  defp dt_bias(n) do
    Tensor.from_list(
      for _ <- 1..n do
        dt = :math.exp(:math.log(1.0e-3) + :rand.uniform() * (:math.log(0.1) - :math.log(1.0e-3)))
        :math.log(:math.exp(dt) - 1)
      end,
      {n}
    )
  end

  @doc """
  Precomputes what inference reads but training changes: A = -exp(A_log) per layer. `forward/3`
  and `step/3` use it when present (train_step/4 drops it, as A_log moves).

  Options:

    * `weights: :bf16` — the projections' weights (embed, in_proj, x_proj, dt_proj, out_proj,
      head) rounded to `{:bf, 16}`: half the bytes, and with `Ssmkit.set_bf16_products(true)`
      their products with x rounded to bf16 too (on AMX's bf16 tiles where the CPU has them:
      several times faster than f32 for a window). Inference only: the backward of
      `loss_and_grad/4` and `train_step/5` needs the f32 weights (keep them for training).
  """
  @spec prepare(params, keyword) :: params
  def prepare(params, opts \\ []) do
    params =
      update_in(params.layers, fn layers ->
        Enum.map(layers, &Map.put(&1, :a, Elementwise.neg_exp(&1.a_log)))
      end)

    case Keyword.get(opts, :weights, :f32) do
      :f32 ->
        params

      :bf16 ->
        round_weights(params)

      other ->
        raise ArgumentError, "prepare: weights: expected :f32 or :bf16, given #{inspect(other)}"
    end
  end

  @projections ~w(in_proj x_proj dt_proj out_proj)a

  defp round_weights(params) do
    bf16 = &Tensor.as_type(&1, {:bf, 16})

    %{
      params
      | embed: bf16.(params.embed),
        head: bf16.(params.head),
        layers:
          Enum.map(params.layers, fn p ->
            Enum.reduce(@projections, p, fn k, acc -> Map.update!(acc, k, bf16) end)
          end)
    }
  end

  # ---------------------------------------------------------------- the window forward

  @window_layer_keys ~w(norm in_proj conv_w conv_b x_proj dt_proj dt_bias a d out_proj)a

  @doc """
  The outputs (B, L, O) for inputs x (B, L, d_in) from a zero state, in one NIF call (the ops
  of `forward_ops/3` run back to back in C on buffers the NIF keeps). Options: `dirty: true |
  false` runs the call on a dirty CPU scheduler or on the caller's own (default: dirty above
  2^24 multiply-adds, the ops' rule; the `policy` window has 55 M). A call that returns within
  a millisecond may run on the caller's scheduler and saves the hop to a dirty one.
  """
  @spec forward(params, Tensor.t(), t, keyword) :: Tensor.t()
  def forward(params, x, c \\ %__MODULE__{}, opts \\ []) do
    layers =
      Enum.map(params.layers, fn p ->
        p
        |> Map.put(:a, decay(p))
        |> Map.take(@window_layer_keys)
        |> Map.new(fn {k, v} -> {k, Tensor.to_nif(v)} end)
      end)

    args = %{
      x: Tensor.to_nif(x),
      embed: Tensor.to_nif(params.embed),
      norm_f: Tensor.to_nif(params.norm_f),
      head: Tensor.to_nif(params.head),
      layers: layers,
      eps: c.eps
    }

    args = if Keyword.has_key?(opts, :dirty), do: Map.put(args, :dirty, opts[:dirty]), else: args

    args |> NIF.mamba1_net_fwd() |> ok!() |> Map.fetch!(:out) |> Tensor.from_nif()
  end

  @doc """
  The same outputs as `forward/3`, one op NIF at a time: the forward that `loss_and_grad/4`
  runs (it keeps the activations for the backward).
  """
  @spec forward_ops(params, Tensor.t(), t) :: Tensor.t()
  def forward_ops(params, x, c \\ %__MODULE__{}) do
    {out, _tape} = forward_tape(params, x, c)
    out
  end

  # The forward, keeping what the backward reads.
  defp forward_tape(params, %Tensor{shape: {b, l, _}} = x, c) do
    h0 = ok!(Ops.linear(flat(x), params.embed))

    {h, residual, tapes} =
      Enum.reduce(params.layers, {h0, nil, []}, fn p, {h, residual, tapes} ->
        {n, residual_out} =
          ok!(Ops.rms_norm_fn(h, p.norm, residual: residual, prenorm: true, eps: c.eps))

        {out, tape} = mixer(p, n, b, l)
        {out, residual_out, [%{tape | h: h, residual: residual} | tapes]}
      end)

    nf = ok!(Ops.rms_norm_fn(h, params.norm_f, residual: residual, eps: c.eps))
    y = ok!(Ops.linear(nf, params.head))
    out = Tensor.reshape(y, {b, l, elem(y.shape, 1)})
    {out, %{x: flat(x), h: h, residual: residual, nf: nf, layers: tapes}}
  end

  # A = -exp(A_log): prepare/1's, else computed here.
  defp decay(p), do: Map.get_lazy(p, :a, fn -> Elementwise.neg_exp(p.a_log) end)

  # What both mixers start with: the layer's sizes {D, R, N}, A, and in_proj's x and z as
  # channels (B, D, L).
  defp mixer_input(p, n, b, l) do
    di = elem(p.d.shape, 0)
    a = decay(p)
    xz = ok!(Ops.linear(n, p.in_proj))
    [xs, z] = ok!(Layout.tokens_to_channels(Tensor.reshape(xz, {b, l, 2 * di}), [di, di]))
    {{di, elem(p.dt_proj.shape, 1), elem(p.a_log.shape, 1)}, a, xs, z}
  end

  defp mixer(p, n, b, l) do
    {{di, r, ns}, a, xs, z} = mixer_input(p, n, b, l)
    xc = ok!(Ops.causal_conv1d_fn(xs, p.conv_w, bias: p.conv_b, activation: :silu))
    xc_t = xc |> to_tokens() |> flat()
    x_dbl = ok!(Ops.linear(xc_t, p.x_proj))

    [dt_c, bm, cm] =
      ok!(Layout.tokens_to_channels(Tensor.reshape(x_dbl, {b, l, r + 2 * ns}), [r, ns, ns]))

    dt_t = dt_c |> to_tokens() |> flat()
    delta_t = ok!(Ops.linear(dt_t, p.dt_proj))
    [delta] = ok!(Layout.tokens_to_channels(Tensor.reshape(delta_t, {b, l, di}), [di]))

    y =
      ok!(
        Ops.selective_scan_fn(xc, delta, a, bm, cm,
          d: p.d,
          z: z,
          delta_bias: p.dt_bias,
          delta_softplus: true
        )
      )

    y_t = y |> to_tokens() |> flat()
    out = ok!(Ops.linear(y_t, p.out_proj))

    tape = %{
      n: n,
      xs: xs,
      z: z,
      xc: xc,
      xc_t: xc_t,
      dt_t: dt_t,
      delta: delta,
      bm: bm,
      cm: cm,
      y_t: y_t,
      a: a,
      h: nil,
      residual: nil,
      b: b,
      l: l
    }

    {out, tape}
  end

  # ---------------------------------------------------------------- training

  @doc """
  The mean-squared error of `forward/3` against `target` (B, L, O) and the gradient of every
  parameter (the structure of `params`, without `:a`): `{loss, grads}`.
  """
  @spec loss_and_grad(params, Tensor.t(), Tensor.t(), t) :: {float, params}
  def loss_and_grad(params, x, target, c \\ %__MODULE__{}) do
    {out, tape} = forward_tape(params, x, c)
    {loss, dout} = Elementwise.mse(out, target)
    {loss, backward(params, tape, flat(dout), c)}
  end

  defp backward(params, tape, dy, c) do
    %{dx: dnf, dweight: dhead} = ok!(Ops.linear_bwd(tape.nf, params.head, dy))

    %{dx: dh, dweight: dnorm_f} =
      g = ok!(Ops.rms_norm_bwd(tape.h, params.norm_f, dnf, residual: tape.residual, eps: c.eps))

    # Walk the layers back: dh is the gradient of the layer's output, dres that of the residual
    # stream it left (the next norm's residual input).
    {dh0, _, layer_grads} =
      params.layers
      |> Enum.zip(tape.layers |> Enum.reverse())
      |> Enum.reverse()
      |> Enum.reduce({dh, g[:dresidual], []}, fn {p, t}, {dh, dres, acc} ->
        {dn, grads} = mixer_backward(p, t, dh)

        norm =
          ok!(
            Ops.rms_norm_bwd(t.h, p.norm, dn,
              residual: t.residual,
              dresidual_out: dres,
              eps: c.eps
            )
          )

        {norm.dx, norm[:dresidual], [Map.put(grads, :norm, norm.dweight) | acc]}
      end)

    %{dweight: dembed} = ok!(Ops.linear_bwd(tape.x, params.embed, dh0, dx: false))
    %{embed: dembed, layers: layer_grads, norm_f: dnorm_f, head: dhead}
  end

  defp mixer_backward(p, t, dout) do
    di = elem(p.d.shape, 0)
    r = elem(p.dt_proj.shape, 1)
    %{dx: dy_t, dweight: dout_proj} = ok!(Ops.linear_bwd(t.y_t, p.out_proj, dout))
    [dy] = ok!(Layout.tokens_to_channels(Tensor.reshape(dy_t, {t.b, t.l, di}), [di]))

    s =
      ok!(
        Ops.selective_scan_bwd(t.xc, t.delta, t.a, t.bm, t.cm, dy,
          d: p.d,
          z: t.z,
          delta_bias: p.dt_bias,
          delta_softplus: true
        )
      )

    ddelta_t = s.ddelta |> to_tokens() |> flat()
    %{dx: ddt_t, dweight: ddt_proj} = ok!(Ops.linear_bwd(t.dt_t, p.dt_proj, ddelta_t))
    [ddt_c] = ok!(Layout.tokens_to_channels(Tensor.reshape(ddt_t, {t.b, t.l, r}), [r]))
    dx_dbl = ok!(Layout.channels_to_tokens([ddt_c, s.db, s.dc])) |> flat()
    %{dx: dxc_t, dweight: dx_proj} = ok!(Ops.linear_bwd(t.xc_t, p.x_proj, dx_dbl))
    [dxc_proj] = ok!(Layout.tokens_to_channels(Tensor.reshape(dxc_t, {t.b, t.l, di}), [di]))
    dxc = ok!(Layout.add(s.du, dxc_proj))
    conv = ok!(Ops.causal_conv1d_bwd(t.xs, p.conv_w, dxc, bias: p.conv_b, activation: :silu))
    dxz = ok!(Layout.channels_to_tokens([conv.dx, s.dz])) |> flat()
    %{dx: dn, dweight: din_proj} = ok!(Ops.linear_bwd(t.n, p.in_proj, dxz))

    grads = %{
      in_proj: din_proj,
      conv_w: conv.dweight,
      conv_b: conv.dbias,
      x_proj: dx_proj,
      dt_proj: ddt_proj,
      dt_bias: s.ddelta_bias,
      # A = -exp(A_log): dA_log = dA * A
      a_log: Elementwise.mul(s.da, t.a),
      d: s.dd,
      out_proj: dout_proj
    }

    {dn, grads}
  end

  @doc """
  One training step: forward, backward, Adam. `{loss, params, adam}`; `adam` from
  `Ssmkit.Adam.init/2` (on the parameters without `:a`).
  """
  @spec train_step(params, Adam.t(), Tensor.t(), Tensor.t(), t) :: {float, params, Adam.t()}
  def train_step(params, %Adam{} = adam, x, target, c \\ %__MODULE__{}) do
    params = drop_prepared(params)
    {loss, grads} = loss_and_grad(params, x, target, c)
    {params, adam} = Adam.update(params, grads, adam)
    {loss, params, adam}
  end

  @doc "The parameters without what `prepare/1` added."
  @spec drop_prepared(params) :: params
  def drop_prepared(params),
    do: update_in(params.layers, fn ls -> Enum.map(ls, &Map.delete(&1, :a)) end)

  # ---------------------------------------------------------------- one frame at a time

  @doc """
  Zero conv and SSM states for `batch` streams of frames: per layer a conv state (B, D, K - 1)
  and an SSM state (B, D, N), each an `Ssmkit.State` updated in place by `step/3`.
  """
  @spec init_state(params, pos_integer) :: [%{conv: State.t(), ssm: State.t()}]
  def init_state(params, batch \\ 1) do
    for p <- params.layers do
      {di, k} = p.conv_w.shape
      {:ok, conv} = State.new({batch, di, k - 1})
      {:ok, ssm} = State.new({batch, di, elem(p.a_log.shape, 1)})
      %{conv: conv, ssm: ssm}
    end
  end

  @doc "The outputs (B, O) for one frame (B, d_in) of each stream, advancing their states."
  @spec step(params, list, Tensor.t(), t) :: Tensor.t()
  def step(params, states, %Tensor{shape: {b, _}} = frame, c \\ %__MODULE__{}) do
    h0 = ok!(Ops.linear(frame, params.embed))

    {h, residual} =
      params.layers
      |> Enum.zip(states)
      |> Enum.reduce({h0, nil}, fn {p, s}, {h, residual} ->
        {n, residual_out} =
          ok!(Ops.rms_norm_fn(h, p.norm, residual: residual, prenorm: true, eps: c.eps))

        {mixer_step(p, s, n, b), residual_out}
      end)

    nf = ok!(Ops.rms_norm_fn(h, params.norm_f, residual: residual, eps: c.eps))
    ok!(Ops.linear(nf, params.head))
  end

  defp mixer_step(p, s, n, b) do
    {{di, r, ns}, a, xs, z} = mixer_input(p, n, b, 1)

    xc =
      ok!(
        Ops.causal_conv1d_update(s.conv, Tensor.reshape(xs, {b, di}), p.conv_w,
          bias: p.conv_b,
          activation: :silu
        )
      )

    x_dbl = ok!(Ops.linear(xc, p.x_proj))

    [dt, bm, cm] =
      ok!(Layout.tokens_to_channels(Tensor.reshape(x_dbl, {b, 1, r + 2 * ns}), [r, ns, ns]))

    delta = ok!(Ops.linear(Tensor.reshape(dt, {b, r}), p.dt_proj))

    y =
      ok!(
        Ops.selective_state_update(
          s.ssm,
          xc,
          delta,
          a,
          Tensor.reshape(bm, {b, ns}),
          Tensor.reshape(cm, {b, ns}),
          d: p.d,
          z: Tensor.reshape(z, {b, di}),
          dt_bias: p.dt_bias,
          dt_softplus: true
        )
      )

    ok!(Ops.linear(y, p.out_proj))
  end

  # ---------------------------------------------------------------- helpers

  # (B, L, F) as rows (B * L, F).
  defp flat(%Tensor{shape: {b, l, f}} = t), do: Tensor.reshape(t, {b * l, f})
  defp flat(%Tensor{} = t), do: t

  # (B, F, L) -> (B, L, F)
  defp to_tokens(t), do: ok!(Layout.channels_to_tokens([t]))

  defp ok!({:ok, value}), do: value
  defp ok!({:error, message}), do: raise(ArgumentError, message)
end
