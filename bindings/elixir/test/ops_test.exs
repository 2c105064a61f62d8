defmodule Ssmkit.OpsTest do
  # Every op forward and backward against fixtures the Python package (numpy API) produced on
  # the same inputs (test/fixtures/make_fixtures.py; the linear layer's from numpy in float64).
  # The ops themselves are checked against fp64 oracles by the C++ suite; what is tested here
  # is the NIF's side: argument mapping, options, output shapes and types, results.
  use ExUnit.Case, async: true
  import Ssmkit.TestHelpers
  alias Ssmkit.{Ops, State, Tensor}

  @ops fixture("ops")
  # Same library, same inputs, one thread on both sides: the differences are rounding of the
  # fixture's own float32 computation order at most.
  @tol 1.0e-5

  defp check_all(got, want_case, keys, what) do
    for key <- keys do
      assert Map.has_key?(got, String.to_atom(key)),
             "#{what}: no #{key} in #{inspect(Map.keys(got))}"

      assert_close(
        Map.fetch!(got, String.to_atom(key)),
        Map.fetch!(want_case, key),
        @tol,
        "#{what} #{key}"
      )
    end
  end

  test "selective_scan_fn and selective_scan_bwd" do
    c = @ops["scan"]

    opts = [
      d: c["d"],
      z: c["z"],
      delta_bias: c["delta_bias"],
      delta_softplus: true,
      initial_state: c["initial_state"]
    ]

    assert {:ok, {out, last}} =
             Ops.selective_scan_fn(c["u"], c["delta"], c["a"], c["b"], c["c"], [
               {:return_last_state, true} | opts
             ])

    assert out.type == {:f, 32} and out.shape == {2, 8, 20}
    assert_close(out, c["out"], @tol, "scan out")
    assert_close(last, c["last_state"], @tol, "scan last_state")

    assert {:ok, g} =
             Ops.selective_scan_bwd(c["u"], c["delta"], c["a"], c["b"], c["c"], c["dout"], [
               {:dlast_state, c["dlast_state"]} | opts
             ])

    check_all(g, c, ~w(du ddelta da db dc dd dz ddelta_bias dinitial_state), "scan")
  end

  test "selective_scan_fn on bf16 inputs returns bf16" do
    c = @ops["scan_bf16"]

    assert {:ok, out} =
             Ops.selective_scan_fn(c["u"], c["delta"], c["a"], c["b"], c["c"],
               z: c["z"],
               delta_softplus: true
             )

    assert out.type == {:bf, 16}
    assert_close(out, c["out"], 1.0e-2, "scan bf16 out")
  end

  test "every scan algorithm gives the sequential result" do
    c = @ops["scan"]

    {:ok, want} =
      Ops.selective_scan_fn(c["u"], c["delta"], c["a"], c["b"], c["c"],
        d: c["d"],
        delta_softplus: true
      )

    for algorithm <- [:chunked, :blelloch, :hillis_steele, :log_space] do
      {:ok, got} =
        Ops.selective_scan_fn(c["u"], c["delta"], c["a"], c["b"], c["c"],
          d: c["d"],
          delta_softplus: true,
          algorithm: algorithm
        )

      assert_close(got, want, 1.0e-4, "scan #{algorithm}")
    end
  end

  test "mamba_chunk_scan_combined and its backward" do
    c = @ops["ssd"]
    opts = [d: c["d"], z: c["z"], dt_bias: c["dt_bias"], dt_softplus: true]

    assert {:ok, {out, final}} =
             Ops.mamba_chunk_scan_combined(c["x"], c["dt"], c["a"], c["b"], c["c"], 16, [
               {:return_final_states, true} | opts
             ])

    assert_close(out, c["out"], @tol, "ssd out")
    assert_close(final, c["final_states"], @tol, "ssd final_states")

    assert {:ok, g} =
             Ops.mamba_chunk_scan_combined_bwd(
               c["x"],
               c["dt"],
               c["a"],
               c["b"],
               c["c"],
               16,
               c["dout"],
               opts
             )

    check_all(g, c, ~w(dx ddt da db dc dd dz ddt_bias), "ssd")
  end

  test "selective_state_update updates a Mamba-1 and a Mamba-2 state in place" do
    for name <- ["step_mamba1", "step_mamba2"] do
      c = @ops[name]
      {:ok, state} = State.from_tensor(c["state"])
      opts = [d: c["d"], z: c["z"], dt_bias: c["dt_bias"], dt_softplus: true]

      assert {:ok, out} =
               Ops.selective_state_update(state, c["x"], c["dt"], c["a"], c["b"], c["c"], opts)

      assert_close(out, c["out"], @tol, "#{name} out")
      {:ok, new_state} = State.to_tensor(state)
      assert_close(new_state, c["new_state"], @tol, "#{name} state")
    end
  end

  test "causal_conv1d_fn, causal_conv1d_bwd and causal_conv1d_update" do
    c = @ops["conv1d"]
    opts = [bias: c["bias"], initial_states: c["initial_states"], activation: :silu]

    assert {:ok, {out, final}} =
             Ops.causal_conv1d_fn(c["x"], c["weight"], [{:return_final_states, true} | opts])

    assert_close(out, c["out"], @tol, "conv1d out")
    assert_close(final, c["final_states"], @tol, "conv1d final_states")
    assert {:ok, g} = Ops.causal_conv1d_bwd(c["x"], c["weight"], c["dout"], opts)
    check_all(g, c, ~w(dx dweight dbias dinitial_states), "conv1d")

    u = @ops["conv1d_update"]
    {:ok, state} = State.from_tensor(u["state"])

    assert {:ok, out} =
             Ops.causal_conv1d_update(state, u["x"], u["weight"],
               bias: u["bias"],
               activation: :silu
             )

    assert_close(out, u["out"], @tol, "conv1d_update out")
    {:ok, new_state} = State.to_tensor(state)
    assert_close(new_state, u["new_state"], @tol, "conv1d_update state")
  end

  test "rmsnorm_fn (gated, groups) and rms_norm_fn (residual) with their backwards" do
    c = @ops["rmsnorm"]
    opts = [bias: c["bias"], z: c["z"], eps: 1.0e-5, group_size: 8, norm_before_gate: false]
    assert {:ok, out} = Ops.rmsnorm_fn(c["x"], c["weight"], opts)
    assert_close(out, c["out"], @tol, "rmsnorm out")
    assert {:ok, g} = Ops.rmsnorm_bwd(c["x"], c["weight"], c["dout"], opts)
    check_all(g, c, ~w(dx dweight dbias dz), "rmsnorm")

    c = @ops["add_rmsnorm"]
    opts = [bias: c["bias"], residual: c["residual"], eps: 1.0e-5]
    assert {:ok, {out, res}} = Ops.rms_norm_fn(c["x"], c["weight"], [{:prenorm, true} | opts])
    assert_close(out, c["out"], @tol, "add_rmsnorm out")
    assert_close(res, c["residual_out"], @tol, "add_rmsnorm residual_out")

    assert {:ok, g} =
             Ops.rms_norm_bwd(c["x"], c["weight"], c["dout"], [
               {:dresidual_out, c["dresidual_out"]} | opts
             ])

    check_all(g, c, ~w(dx dresidual dweight dbias), "add_rmsnorm")
  end

  test "the norms take (..., E) as mamba_ssm's do, and give results that shape" do
    c = @ops["add_rmsnorm"]
    cube = fn t -> Tensor.reshape(t, {2, 3, 16}) end
    opts = [bias: c["bias"], eps: 1.0e-5]

    {:ok, {out, res}} =
      Ops.rms_norm_fn(cube.(c["x"]), c["weight"], [
        {:residual, cube.(c["residual"])},
        {:prenorm, true} | opts
      ])

    assert out.shape == {2, 3, 16} and res.shape == {2, 3, 16}
    assert_close(Tensor.reshape(out, {6, 16}), c["out"], @tol, "(..., E) out")

    {:ok, g} =
      Ops.rms_norm_bwd(cube.(c["x"]), c["weight"], cube.(c["dout"]), [
        {:residual, cube.(c["residual"])},
        {:dresidual_out, cube.(c["dresidual_out"])} | opts
      ])

    assert g.dx.shape == {2, 3, 16} and g.dresidual.shape == {2, 3, 16} and
             g.dweight.shape == {16}

    assert_close(Tensor.reshape(g.dx, {6, 16}), c["dx"], @tol, "(..., E) dx")
    r = @ops["rmsnorm"]

    {:ok, out} =
      Ops.rmsnorm_fn(cube.(r["x"]), r["weight"],
        bias: r["bias"],
        z: cube.(r["z"]),
        eps: 1.0e-5,
        group_size: 8,
        norm_before_gate: false
      )

    assert_close(Tensor.reshape(out, {6, 16}), r["out"], @tol, "(..., E) gated out")
  end

  test "linear and linear_bwd against numpy in float64" do
    c = @ops["linear"]
    assert {:ok, out} = Ops.linear(c["x"], c["weight"], bias: c["bias"])
    assert_close(out, c["out"], @tol, "linear out")
    assert {:ok, g} = Ops.linear_bwd(c["x"], c["weight"], c["dout"], bias: c["bias"])
    check_all(g, c, ~w(dx dweight dbias), "linear")
    assert {:ok, g} = Ops.linear_bwd(c["x"], c["weight"], c["dout"], dx: false)
    assert Map.keys(g) == [:dweight]
  end

  test "a dirty-scheduled call gives the same bits as a normal one" do
    c = @ops["scan"]
    args = [c["u"], c["delta"], c["a"], c["b"], c["c"]]
    {:ok, normal} = apply(Ops, :selective_scan_fn, args ++ [[d: c["d"], dirty: false]])
    {:ok, dirty} = apply(Ops, :selective_scan_fn, args ++ [[d: c["d"], dirty: true]])
    assert normal.data == dirty.data
  end

  test "inputs are read in place: a sub-binary at an odd offset is copied, not misread" do
    c = @ops["linear"]
    padded = <<0>> <> c["x"].data
    shifted = %{c["x"] | data: binary_part(padded, 1, byte_size(c["x"].data))}
    {:ok, want} = Ops.linear(c["x"], c["weight"])
    {:ok, got} = Ops.linear(shifted, c["weight"])
    assert got.data == want.data
  end

  test "{data, type, shape} tuples are tensors too" do
    c = @ops["linear"]
    {:ok, want} = Ops.linear(c["x"], c["weight"])
    {:ok, got} = Ops.linear(Tensor.to_nif(c["x"]), Tensor.to_nif(c["weight"]))
    assert got == want
  end
end
