defmodule Ssmkit.Model do
  @moduledoc """
  The inference engine: a checkpoint (Hugging Face `MambaForCausalLM` / `Mamba2ForCausalLM` or
  the state-spaces format, safetensors) or the built-in model, its tokenizer, and generation.

      {:ok, model} = Ssmkit.Model.load_default()
      {:ok, text} = Ssmkit.Model.generate(model, "And God said", max_tokens: 40)

  `stream/3` sends the caller `{:token, ref, id, text}` for each token as it is produced, then
  `{:done, ref, info}` (or `{:error, ref, message}`); `cancel/1` stops it after the token in
  flight. Generation runs on a thread of its own with a session of its own, so no scheduler is
  held, and everything it allocated is freed when it ends, cancelled or not. A model is freed by
  the garbage collector once no process, session or stream holds it.

  Sampling options (`generate/3`, `stream/3`): `max_tokens` (64), `temperature` (0: greedy),
  `top_k` (0: off), `top_p` (0 or 1: off), `seed` (0), `ignore_eos` (false), `keep_special`
  (false). The prompt is text (the model's tokenizer encodes it) or a list of token ids.
  """

  alias Ssmkit.NIF

  @sampling [:max_tokens, :temperature, :top_k, :top_p, :seed, :ignore_eos, :keep_special]

  @type t :: reference
  @type prompt :: String.t() | [non_neg_integer]

  defmodule Stream do
    @moduledoc "A running generation: `ref` tags its messages."
    @enforce_keys [:ref, :handle]
    defstruct [:ref, :handle]
    @type t :: %__MODULE__{ref: reference, handle: reference}
  end

  @doc "Loads a checkpoint directory (config.json and model.safetensors, or an index and shards)."
  @spec load(Path.t()) :: {:ok, t} | {:error, String.t()}
  def load(dir), do: NIF.model_load(to_string(dir))

  @doc "Loads the built-in model (models/default: a byte-level Mamba-2; SSMKIT_DEFAULT_MODEL overrides)."
  @spec load_default() :: {:ok, t} | {:error, String.t()}
  def load_default, do: NIF.model_load_default()

  @doc "The model's configuration: arch, d_model, n_layer, vocab_size, eos_token_id, ..."
  @spec config(t) :: {:ok, map} | {:error, String.t()}
  def config(model), do: NIF.model_config(model)

  @doc "Token ids of `text` with the model's tokenizer."
  @spec encode(t, String.t()) :: {:ok, [non_neg_integer]} | {:error, String.t()}
  def encode(model, text) when is_binary(text), do: NIF.tokenizer_encode(model, text)

  @doc "The text of token ids (`skip_special: true` drops special tokens)."
  @spec decode(t, [integer], keyword) :: {:ok, String.t()} | {:error, String.t()}
  def decode(model, ids, opts \\ []),
    do: NIF.tokenizer_decode(model, ids, opts[:skip_special] == true)

  @doc "Generates from `prompt` and returns the generated text (see `collect/2` for the rest)."
  @spec generate(t, prompt, keyword) :: {:ok, String.t()} | {:error, String.t()}
  def generate(model, prompt, opts \\ []) do
    with {:ok, stream} <- stream(model, prompt, opts),
         {:ok, %{text: text}} <- collect(stream) do
      {:ok, text}
    end
  end

  @doc """
  Starts a generation that sends the calling process `{:token, ref, id, text}` per token, then
  `{:done, ref, info}` with `info` `%{prompt_tokens, generated_tokens, prefill_seconds,
  decode_seconds, stopped_at_eos, cancelled}`, or `{:error, ref, message}`.
  """
  @spec stream(t, prompt, keyword) :: {:ok, Stream.t()} | {:error, String.t()}
  def stream(model, prompt, opts \\ []) do
    ref = make_ref()
    options = Map.new(Keyword.take(opts, @sampling))

    with {:ok, handle} <- NIF.stream_start(model, prompt, options, ref) do
      {:ok, %Stream{ref: ref, handle: handle}}
    end
  end

  @doc "Asks a stream to stop after the token in flight; its `{:done, ref, info}` still comes."
  @spec cancel(Stream.t()) :: :ok
  def cancel(%Stream{handle: handle}), do: NIF.stream_cancel(handle)

  @doc """
  Receives a stream's messages until it ends: `{:ok, %{text, tokens, info}}` or
  `{:error, message}`. `on_token` (optional) is called with each `{id, text}` as it arrives.
  """
  @spec collect(Stream.t(), keyword) :: {:ok, map} | {:error, String.t() | :timeout}
  def collect(%Stream{ref: ref} = stream, opts \\ []) do
    timeout = Keyword.get(opts, :timeout, :infinity)
    on_token = Keyword.get(opts, :on_token, fn _ -> :ok end)
    do_collect(stream, ref, timeout, on_token, [], [])
  end

  defp do_collect(stream, ref, timeout, on_token, ids, pieces) do
    receive do
      {:token, ^ref, id, text} ->
        on_token.({id, text})
        do_collect(stream, ref, timeout, on_token, [id | ids], [pieces | text])

      {:done, ^ref, info} ->
        {:ok, %{text: IO.iodata_to_binary(pieces), tokens: Enum.reverse(ids), info: info}}

      {:error, ^ref, message} ->
        {:error, message}
    after
      timeout ->
        cancel(stream)
        {:error, :timeout}
    end
  end
end

defmodule Ssmkit.Session do
  @moduledoc """
  A session over a model: the conv and SSM caches of up to `max_batch` sequences, for logits.
  `prefill/2` runs prompts from a fresh state; `decode/2` feeds one more token per sequence.
  Logits are `Ssmkit.Tensor`s (B, V) f32. One process at a time uses a session (a mutex inside).
  """

  alias Ssmkit.{NIF, Tensor}

  @type t :: reference

  @doc "A session for up to `max_batch` sequences."
  @spec new(Ssmkit.Model.t(), pos_integer) :: {:ok, t} | {:error, String.t()}
  def new(model, max_batch \\ 1), do: NIF.session_new(model, max_batch)

  @doc "Runs the prompts (lists of token ids, lengths may differ); their last positions' logits."
  @spec prefill(t, [[non_neg_integer]]) :: {:ok, Tensor.t()} | {:error, String.t()}
  def prefill(session, prompts) do
    with {:ok, logits} <- NIF.session_prefill(session, prompts),
         do: {:ok, Tensor.from_nif(logits)}
  end

  @doc "One more token per sequence of the last prefill; their logits. Allocates only the result."
  @spec decode(t, [non_neg_integer]) :: {:ok, Tensor.t()} | {:error, String.t()}
  def decode(session, tokens) do
    with {:ok, logits} <- NIF.session_decode(session, tokens), do: {:ok, Tensor.from_nif(logits)}
  end
end
