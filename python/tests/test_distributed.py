"""Data-parallel training across 2 processes on loopback with the engines users scale with:
torch DDP (gloo) over ssmkit.torch, and JAX multi-process (jax.distributed, CPU devices, gloo
collectives) over ssmkit.jax. Each runs the example script of python/examples (the ones
docs/integrations.md launches with torchrun and SLURM) twice: as 2 processes, and as one
process on the whole batch; the per-step losses and the final parameters must agree."""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from checks import assert_close

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
TIMEOUT = 240  # seconds per run; a run takes a few seconds on an idle machine


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """This interpreter's environment without the test session's 4 forced host devices."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_processes(script, args, envs):
    procs = [subprocess.Popen([sys.executable, os.path.join(EXAMPLES, script), *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for env in envs]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=TIMEOUT)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out


@pytest.mark.parametrize("arch", ["mamba1", "mamba2"])
def test_torch_ddp_two_processes_equal_one(arch, tmp_path):
    torch = pytest.importorskip("torch")
    args = ["--arch", arch, "--steps", "3", "--batch", "4"]
    run_processes("torch_ddp_train.py", args + ["--out", str(tmp_path / "one.pt")],
                  [clean_env()])
    port = free_port()
    run_processes("torch_ddp_train.py", args + ["--out", str(tmp_path / "two.pt")],
                  [clean_env(RANK=r, WORLD_SIZE=2, LOCAL_RANK=r, MASTER_ADDR="127.0.0.1",
                             MASTER_PORT=port) for r in range(2)])
    one = torch.load(tmp_path / "one.pt")
    two = torch.load(tmp_path / "two.pt")
    assert_close(two["losses"], one["losses"], 1e-5, "losses")
    assert one["losses"][-1] < one["losses"][0]
    for name, value in one["state_dict"].items():
        assert_close(two["state_dict"][name].numpy(), value.numpy(), 1e-5, name)


def test_jax_distributed_two_processes_equal_one(tmp_path):
    args = ["--steps", "3", "--batch", "4"]
    run_processes("jax_distributed_train.py", args + ["--out", str(tmp_path / "one.npz")],
                  [clean_env()])
    port = free_port()
    run_processes("jax_distributed_train.py", args + ["--out", str(tmp_path / "two.npz")],
                  [clean_env(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=2,
                             JAX_PROCESS_ID=r, JAX_PLATFORMS="cpu") for r in range(2)])
    one, two = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert set(one.files) == set(two.files) and len(one.files) > 2
    assert_close(two["losses"], one["losses"], 1e-5, "losses")
    assert one["losses"][-1] < one["losses"][0]
    for name in one.files:
        assert_close(two[name], one[name], 1e-5, name)
