defmodule Mix.Tasks.Compile.SsmkitNif do
  @moduledoc "Builds priv/ssmkit_nif.so with the Makefile (pkg-config finds ssmkit)."
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    erts_include =
      Path.join([to_string(:code.root_dir()), "erts-#{:erlang.system_info(:version)}", "include"])

    {output, status} =
      System.cmd("make", ["--no-print-directory", "-C", File.cwd!()],
        env: [{"ERTS_INCLUDE_DIR", erts_include}],
        stderr_to_stdout: true
      )

    if status == 0 do
      # The Makefile may have just created priv/, after Mix linked the project's directories
      # into _build: link it now, so that the NIF loads while the Elixir modules compile.
      Mix.Project.build_structure()
      {:ok, []}
    else
      Mix.shell().error(output)
      {:error, [diagnostic(output)]}
    end
  end

  defp diagnostic(output) do
    %Mix.Task.Compiler.Diagnostic{
      compiler_name: "ssmkit_nif",
      file: "Makefile",
      message: "make failed:\n" <> output,
      position: nil,
      severity: :error
    }
  end
end

defmodule Ssmkit.MixProject do
  use Mix.Project

  def project do
    [
      app: :ssmkit,
      version: "0.1.0",
      elixir: "~> 1.14",
      compilers: [:ssmkit_nif] ++ Mix.compilers(),
      start_permanent: Mix.env() == :prod,
      deps: deps(),
      test_paths: ["test"]
    ]
  end

  def application, do: [extra_applications: []]

  # No dependency by default (hex.pm is unreachable from the project's machines). With
  # SSMKIT_EXLA=1, EXLA becomes an optional dependency so that it compiles before this package
  # and Ssmkit.EXLA is defined (lib/ssmkit/exla.ex); nothing of that route runs in CI.
  defp deps do
    if System.get_env("SSMKIT_EXLA") in ["1", "true"] do
      [{:exla, ">= 0.12.0", optional: true}]
    else
      []
    end
  end
end
