defmodule Ssmkit.State do
  @moduledoc """
  A decode step's state in a NIF resource: an f32 buffer that `Ssmkit.Ops.selective_state_update/7`
  and `Ssmkit.Ops.causal_conv1d_update/4` update in place, so a game loop runs one step per frame
  without copying the state in or out of the VM.

  The garbage collector frees a state once no process holds it; `release/1` frees it at once,
  after which every use is `{:error, "state: released"}`. A state is stepped by one call at a
  time (a mutex inside), so processes may share one safely, if not usefully.
  """

  alias Ssmkit.{NIF, Tensor}

  @typedoc "A state resource (an opaque reference)."
  @type t :: reference

  @doc "A state of zeros, e.g. `{b, d, n}` for a Mamba-1 SSM state or `{b, d, k - 1}` for a conv state."
  @spec new(tuple) :: {:ok, t} | {:error, String.t()}
  def new(shape), do: NIF.state_new(shape)

  @doc "A state holding a copy of an f32 tensor."
  @spec from_tensor(Ssmkit.Ops.tensor()) :: {:ok, t} | {:error, String.t()}
  def from_tensor(tensor), do: NIF.state_from_tensor(Tensor.to_nif(tensor))

  @doc "A copy of the state's current values."
  @spec to_tensor(t) :: {:ok, Tensor.t()} | {:error, String.t()}
  def to_tensor(state) do
    with {:ok, t} <- NIF.state_to_tensor(state), do: {:ok, Tensor.from_nif(t)}
  end

  @doc "Frees the state's memory now (the resource itself goes with the garbage collector)."
  @spec release(t) :: :ok | {:error, String.t()}
  def release(state), do: NIF.state_release(state)
end
