#!/usr/bin/env python3
"""Data-parallel training of a small Mamba language model (ssmkit.torch's MambaLMHeadModel)
with torch DistributedDataParallel, on CPUs (gloo) or GPUs (nccl).

Each step draws one global batch (the same for any number of processes: seeded by the step);
process r of W trains on its rows [r B/W, (r+1) B/W), DDP averages the gradients, so the run
follows the single-process run on the whole batch. Launch it the way torch jobs launch:

    python torch_ddp_train.py --out run.pt                      # one process (no launcher)
    torchrun --nproc-per-node 2 torch_ddp_train.py --out run.pt  # 2 processes, this machine
    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 torch_ddp_train.py --out run.pt   # on each of 4 nodes
    srun --ntasks 32 python torch_ddp_train.py --out run.pt     # SLURM: RANK and WORLD_SIZE
                                                                 # from SLURM_PROCID/NTASKS;
                                                                 # set MASTER_ADDR/PORT

Rank 0 saves {"losses": per-step global mean loss, "state_dict": final parameters} to --out.
"""
import argparse
import gc
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ssmkit
import ssmkit.torch as st


def world_from_env():
    """(rank, world size, local rank): torchrun's variables, else SLURM's, else one process."""
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
        env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
    return (int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)),
            int(env.get("LOCAL_RANK", 0)))


def model_config(arch):
    ssm_cfg = {"layer": "Mamba1", "d_state": 8} if arch == "mamba1" else {
        "layer": "Mamba2", "d_state": 16, "headdim": 16, "ngroups": 2, "chunk_size": 16}
    return st.MambaConfig(d_model=64, n_layer=2, vocab_size=256, ssm_cfg=ssm_cfg)


def global_batch(step, batch, seqlen, vocab):
    return torch.randint(0, vocab, (batch, seqlen + 1),
                         generator=torch.Generator().manual_seed(1000 + step))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=["mamba1", "mamba2"], default="mamba1")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4, help="global batch (sequences per step)")
    ap.add_argument("--seqlen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="per process, torch and ssmkit")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank, world, local_rank = world_from_env()
    torch.set_num_threads(a.threads)
    ssmkit.set_num_threads(a.threads)
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if a.batch % world:
        raise SystemExit(f"--batch {a.batch} must be a multiple of the world size {world}")

    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = st.MambaLMHeadModel(model_config(a.arch), device=device)
    trained = DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = a.batch // world
    losses = []
    for step in range(a.steps):
        ids = global_batch(step, a.batch, a.seqlen, 256)[rank * rows:(rank + 1) * rows]
        ids = ids.to(device)
        logits = trained(ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the processes here
        optimizer.step()
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
            mean /= world
        losses.append(mean.item())
    if rank == 0:
        torch.save({"losses": losses, "state_dict": model.state_dict()}, a.out)
        print(f"{world} process(es), losses {losses}")
    if world > 1:
        # The DDP wrapper holds the process group, whose gloo threads must stop while the
        # interpreter is alive: one still there at its finalization may reach for the GIL, be
        # ended by Python and abort the process ("terminate called without an active exception",
        # 6 runs in 103 on 2 cores). The wrapper sits in reference cycles: only a collection frees
        # it.
        del trained
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
