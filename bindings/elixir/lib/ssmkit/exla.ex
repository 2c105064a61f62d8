# Compiled only when EXLA (>= 0.12, which has EXLA.CustomCall) is a dependency of the project
# (set SSMKIT_EXLA=1 when compiling this package so that mix.exs lists it and it compiles first).
# Nothing of this module has been compiled or run in this repository (no EXLA on its machines):
# docs/integrations.md says what was checked and how.
if Code.ensure_loaded?(EXLA.CustomCall) and Code.ensure_loaded?(Nx.Defn) do
  defmodule Ssmkit.EXLA do
    @moduledoc """
    ssmkit's selective scan inside `defn`, with its gradient, as an XLA custom call of the
    program EXLA compiles (the route `ssmkit.jax` takes in JAX).

        Ssmkit.EXLA.load()   # once, before compiling: registers the FFI handlers

        defn loss(u, delta, a, b, c, d) do
          Ssmkit.EXLA.selective_scan_fn(u, delta, a, b, c, d: d, delta_softplus: true)
          |> Nx.sum()
        end

        Nx.Defn.jit(&Nx.Defn.grad(&1, fn u -> loss(u, ...) end), compiler: EXLA)

    `selective_scan_fn/6` is an `Nx.block/4` tagged `%Ssmkit.EXLA.Call{}`, which this module's
    `EXLA.CustomCall` implementation lowers to `stablehlo.custom_call @ssmkit_selective_scan_fwd`
    on the host (`:skip` elsewhere: the block's default raises, there is no pure-Nx fallback);
    its gradient (`Nx.Defn.Kernel.custom_grad/3`) is a second block on
    `ssmkit_selective_scan_bwd`. The handlers behind the targets are python/src/ffi_handlers.cpp,
    the ones the JAX tests exercise, built into `priv/libssmkit_exla.so` by `exla/Makefile`.
    The last state, when returned, carries no gradient.

    Nx has no empty tensors, so an absent optional operand travels as a scalar whose rank in the
    `ranks` attribute is -1 (ssmkit.jax passes a `(0,)` array instead; the handlers take both).
    """

    import Nx.Defn

    @doc """
    Loads `priv/libssmkit_exla.so` (or `path`) into the VM so that its XLA FFI registrations run:
    `EXLA.load_dylib/1` where EXLA has it (after 0.13.1), else `EXLA.NIF.load_dylib/1`, the
    undocumented function of EXLA's private NIF module that EXLA 0.12 and 0.13 have.
    """
    def load(path \\ Application.app_dir(:ssmkit, "priv/libssmkit_exla.so")) do
      Code.ensure_loaded(EXLA)

      if function_exported?(EXLA, :load_dylib, 1) do
        apply(EXLA, :load_dylib, [path])
      else
        apply(EXLA.NIF, :load_dylib, [path])
      end
    end

    defmodule Call do
      @moduledoc "An `Nx.block/4` tag: an ssmkit FFI target and its backend_config attributes."
      @enforce_keys [:target]
      defstruct [:target, attributes: []]
    end

    defimpl EXLA.CustomCall, for: Ssmkit.EXLA.Call do
      def call(%Ssmkit.EXLA.Call{target: target, attributes: attributes}, _out, _args, %{
            platform: :host
          }) do
        {:ok, %EXLA.CustomCall.Spec{call_target_name: target, attributes: attributes}}
      end

      def call(_call, _out, _args, _client), do: :skip
    end

    @doc """
    mamba_ssm's `selective_scan_fn` in `defn`: u, delta (B, D, L) f32 or bf16; a (D, N); b, c
    (B, N, L) or (B, G, N, L) or (D, N). Options: `d` (D), `z` (B, D, L), `delta_bias` (D),
    `delta_softplus`, `return_last_state`. Differentiable in u, delta, a, b, c, d, z and
    delta_bias.
    """
    deftransform selective_scan_fn(u, delta, a, b, c, opts \\ []) do
      opts =
        Keyword.validate!(opts, [
          :d,
          :z,
          :delta_bias,
          delta_softplus: false,
          return_last_state: false
        ])

      # initial_state, seq_idx and cu_seqlens: absent
      differentiable = [u, delta, a, b, c, opts[:d], opts[:z], opts[:delta_bias], nil]
      operands = differentiable ++ [nil, nil]
      {batch, dim, _} = Nx.shape(u)
      {_, n} = Nx.shape(a)
      softplus = opts[:delta_softplus] == true

      {out, last, _varlen} =
        custom_call(
          "ssmkit_selective_scan_fwd",
          operands,
          [Nx.template(Nx.shape(u), Nx.type(u)), Nx.template({batch, dim, n}, {:f, 32}), nil],
          delta_softplus: softplus,
          algorithm: 0,
          chunk_length: 0
        )

      present = Enum.reject(differentiable, &is_nil/1)

      out =
        Nx.Defn.Kernel.custom_grad(out, present, fn g ->
          grads =
            custom_call(
              "ssmkit_selective_scan_bwd",
              operands ++ [g, nil, nil],
              Enum.map(differentiable, &(&1 && Nx.template(Nx.shape(&1), Nx.type(&1)))),
              delta_softplus: softplus,
              chunk_length: 0
            )

          for {x, grad} <- Enum.zip(differentiable, Tuple.to_list(grads)), x != nil, do: grad
        end)

      if opts[:return_last_state], do: {out, Nx.Defn.Kernel.stop_grad(last)}, else: out
    end

    # One custom call: operands (nil: absent) and result templates (nil: absent) in the orders
    # of include/ssmkit/op_tensors.hpp, `ranks` (every operand's then every result's rank, -1 for
    # an absent one) and the target's other attributes.
    defp custom_call(target, operands, results, attrs) do
      marker = Nx.tensor(0.0, type: :f32)
      scalar = Nx.template({}, {:f, 32})

      ranks =
        Enum.map(operands ++ results, fn t -> if t, do: tuple_size(Nx.shape(t)), else: -1 end)

      tag = %Call{
        target: target,
        attributes: [
          {"ranks", "array<i64: #{Enum.join(ranks, ", ")}>"} | Enum.map(attrs, &attribute/1)
        ]
      }

      args = Enum.map(operands, &(&1 || marker))

      Nx.block(
        tag,
        args,
        List.to_tuple(Enum.map(results, &(&1 || scalar))),
        unsupported(length(args) + 1)
      )
    end

    defp attribute({name, value}) when is_boolean(value),
      do: {Atom.to_string(name), to_string(value)}

    defp attribute({name, value}) when is_integer(value),
      do: {Atom.to_string(name), "#{value} : i64"}

    # The blocks' default implementation (what EXLA compiles when the custom call is skipped,
    # off the host, and what any other backend runs): an error, not a silent slow path.
    @unsupported "Ssmkit.EXLA: the ssmkit custom calls run on EXLA's host client only " <>
                   "(compiler: EXLA on the CPU, after Ssmkit.EXLA.load/1)"
    for arity <- [12, 15] do
      args = for i <- 1..arity, do: Macro.var(:"_arg#{i}", __MODULE__)

      defp unsupported(unquote(arity)),
        do: fn unquote_splicing(args) -> raise ArgumentError, @unsupported end
    end
  end
end
