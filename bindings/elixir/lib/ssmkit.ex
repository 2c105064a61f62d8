defmodule Ssmkit do
  @moduledoc """
  ssmkit from Elixir: the selective state space kernels (Mamba-1 and Mamba-2), forward and
  backward, the decode steps with their state in place, the inference engine and a policy
  network trained from the BEAM, over ssmkit's C ABI (`include/ssmkit/ssmkit.h`) through a NIF.

    * `Ssmkit.Ops` — every op forward and backward, mamba_ssm's names, on `Ssmkit.Tensor`s
      (binaries with Nx's type and shape conventions);
    * `Ssmkit.State` — a decode step's state in a NIF resource, updated in place;
    * `Ssmkit.Model`, `Ssmkit.Session` — checkpoints, logits, `generate` and `stream`;
    * `Ssmkit.Policy`, `Ssmkit.Adam` — the `policy` network and its training step;
    * `Ssmkit.Layout` — the transposes between a network's projections and its scans.

  Errors are values: `{:error, message}` with the C ABI's message, never a crash of the VM.
  """

  @doc "The library's version string and ABI version, and the ABI this NIF was built for."
  @spec versions() :: %{version: String.t(), abi: pos_integer, nif_abi: pos_integer}
  def versions do
    {version, abi, nif_abi} = Ssmkit.NIF.versions()
    %{version: version, abi: abi, nif_abi: nif_abi}
  end

  @doc """
  Sets the thread count of every op (`n <= 0`: the default, `SSMKIT_NUM_THREADS` or all cores).
  Results are bit-identical for a given count.
  """
  @spec set_num_threads(integer) :: :ok | {:error, String.t()}
  def set_num_threads(n), do: Ssmkit.NIF.set_num_threads(n)

  @doc "The thread count the ops use."
  @spec num_threads() :: pos_integer
  def num_threads, do: Ssmkit.NIF.num_threads()

  @doc """
  Turns the opt-in bf16 products on or off, process-wide (the C ABI's
  `ssmkit_set_bf16_products`): a `{:bf, 16}` weight's products with 2 or more rows round x to
  bf16 and sum exact products in f32, with AVX-512 BF16, or AMX's bf16 tiles
  where the CPU has them (`Ssmkit.Policy.prepare/2` with `weights: :bf16`). Returns whether
  they are now in use: `false` on a CPU without AVX-512 BF16.
  """
  @spec set_bf16_products(boolean) :: boolean | {:error, String.t()}
  def set_bf16_products(enable), do: Ssmkit.NIF.set_bf16_products(enable)

  @doc "Whether the bf16 products are in use."
  @spec bf16_products() :: boolean
  def bf16_products, do: Ssmkit.NIF.bf16_products()
end
