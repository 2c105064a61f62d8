defmodule Ssmkit.ModelTest do
  # The engine from Elixir on the built-in model (models/default): generation equal to
  # `ssmkit generate --print-ids` (the committed fixture, and the CLI itself when SSMKIT_CLI
  # names it), stream messages, a cancelled stream that leaks nothing, a session's decode loop
  # equal to its prefill, the tokenizer, and bad input.
  use ExUnit.Case, async: false
  import Ssmkit.TestHelpers
  alias Ssmkit.{Model, NIF, Session, Tensor}

  @generation fixture("generation")["default_model"]
  @prompt "And God said"

  setup_all do
    {:ok, model} = Model.load_default()
    %{model: model}
  end

  test "the built-in model's configuration", %{model: model} do
    assert {:ok, %{arch: :mamba2, vocab_size: 256, tokenizer: true, n_layer: n}} =
             Model.config(model)

    assert n >= 1
  end

  test "greedy generation equals ssmkit generate --print-ids", %{model: model} do
    prompt_ids = Tensor.to_list(@generation["prompt_ids"])
    want = Tensor.to_list(@generation["generated_ids"])
    assert {:ok, ^prompt_ids} = Model.encode(model, @prompt)
    {:ok, stream} = Model.stream(model, @prompt, max_tokens: 24, ignore_eos: true)
    assert {:ok, %{tokens: ^want, text: text, info: info}} = Model.collect(stream)
    assert info.generated_tokens == 24 and info.prompt_tokens == 12 and not info.cancelled
    assert {:ok, ^text} = Model.decode(model, want)
    assert {:ok, ^text} = Model.generate(model, @prompt, max_tokens: 24, ignore_eos: true)

    assert {:ok, %{tokens: ^want}} =
             Model.stream(model, prompt_ids, max_tokens: 24, ignore_eos: true)
             |> elem(1)
             |> Model.collect()

    if cli = System.get_env("SSMKIT_CLI") do
      {out, 0} =
        System.cmd(
          cli,
          ["--threads", "1", "generate", "--prompt", @prompt] ++
            ~w(--max-tokens 24 --ignore-eos --print-ids),
          stderr_to_stdout: true
        )

      [_, ids] = Regex.run(~r/generated ids: ([0-9 ]+)/, out)
      assert Enum.map(String.split(ids), &String.to_integer/1) == want
    end
  end

  test "stream sends {:token, ref, id, text} per token, then {:done, ref, info}", %{model: model} do
    {:ok, %Model.Stream{ref: ref}} = Model.stream(model, @prompt, max_tokens: 5, ignore_eos: true)

    ids =
      for _ <- 1..5 do
        assert_receive {:token, ^ref, id, text}, 30_000
        assert is_integer(id) and is_binary(text)
        id
      end

    assert_receive {:done, ^ref, %{generated_tokens: 5}}, 30_000
    assert ids == Enum.take(Tensor.to_list(@generation["generated_ids"]), 5)
  end

  test "a stream cancelled halfway stops and leaks nothing", %{model: model} do
    before = NIF.live_counts()

    {:ok, %Model.Stream{ref: ref} = stream} =
      Model.stream(model, @prompt, max_tokens: 100_000, ignore_eos: true)

    for _ <- 1..3, do: assert_receive({:token, ^ref, _, _}, 30_000)
    :ok = Model.cancel(stream)

    assert {:ok, %{info: %{cancelled: true, generated_tokens: n}}} =
             Model.collect(stream, timeout: 30_000)

    assert n < 100_000
    # The thread has ended and freed its session; the stream resource goes with the collector.
    wait_until(fn -> NIF.live_counts().threads <= before.threads end)
    :erlang.garbage_collect()
    wait_until(fn -> no_more_than(before) end)
  end

  test "a stream whose caller dies stops by itself", %{model: model} do
    before = NIF.live_counts()
    parent = self()

    spawn(fn ->
      {:ok, %{ref: ref}} = Model.stream(model, @prompt, max_tokens: 100_000, ignore_eos: true)
      receive do: ({:token, ^ref, _, _} -> send(parent, :started))
      exit(:kill)
    end)

    assert_receive :started, 30_000
    wait_until(fn -> no_more_than(before) end)
  end

  test "a session's decode loop gives the logits of a longer prefill", %{model: model} do
    {:ok, ids} = Model.encode(model, "In the beginning God created")
    {head, tail} = Enum.split(ids, 10)
    {:ok, session} = Session.new(model, 2)
    {:ok, logits} = Session.prefill(session, [head, Enum.take(ids, 7)])
    assert logits.shape == {2, 256}

    stepped =
      Enum.reduce(tail, nil, fn id, _ ->
        {:ok, l} = Session.decode(session, [id, 0])
        l
      end)

    {:ok, full} = Session.prefill(session, [ids])

    row = fn %Tensor{data: d}, r ->
      Tensor.new(binary_part(d, r * 256 * 4, 256 * 4), {:f, 32}, {256})
    end

    assert_close(row.(stepped, 0), row.(full, 0), 1.0e-4, "decode loop vs prefill")
  end

  test "bad input to the engine", %{model: model} do
    assert {:error, msg} = Model.load("/no/such/dir")
    assert msg =~ "/no/such/dir"
    assert {:error, _} = Model.load(<<0, 1>>)
    {:ok, session} = Session.new(model, 1)
    assert {:error, msg} = Session.decode(session, [1])
    assert is_binary(msg)
    assert {:error, _} = Session.decode(session, List.duplicate(1, 100_000))
    assert {:error, msg} = Session.prefill(session, [[1, 2, 999]])
    assert msg =~ "999" or msg =~ "token"
    assert {:error, _} = Session.prefill(session, [[1], [2]])
    assert {:error, _} = Session.prefill(session, [[]])
    assert {:error, _} = Session.prefill(session, [:nope])
    assert {:error, _} = Session.new(model, 0)
    assert {:error, _} = Session.new(make_ref(), 1)
    assert {:error, _} = Model.stream(model, [1, :x], max_tokens: 2)
    assert {:error, _} = Model.stream(model, @prompt, max_tokens: -1) |> then(&collect_error/1)
    assert {:error, _} = Model.stream(model, @prompt, temperature: "hot")
    assert {:error, _} = Model.decode(model, [1, :x])
    assert {:error, _} = Model.config(make_ref())
  end

  # Nothing more alive than before (other tests' garbage may go meanwhile: hence <=).
  defp no_more_than(before) do
    now = NIF.live_counts()
    Enum.all?(now, fn {k, v} -> v <= Map.fetch!(before, k) end)
  end

  defp collect_error({:ok, stream}), do: Model.collect(stream, timeout: 30_000)
  defp collect_error(error), do: error

  defp wait_until(fun, tries \\ 1500) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("condition not met: #{inspect(NIF.live_counts())}")
      true -> Process.sleep(20) && wait_until(fun, tries - 1)
    end
  end
end
