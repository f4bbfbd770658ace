"""Several processes for one ``dsf reproduce`` (torchrun, ``srun``): rank 0 decides, the others follow.

Every rank runs the same command, but only global rank 0 reads the state file, decides each row (queued or
done, resume or fresh, which checkpoint), prepares the row folders and writes; :func:`share_decision` hands
its decision to the other ranks, which write nothing. Why not let each rank read the state itself: rank 0
marks rows ``queued`` in the state file while rank 1 may still be reading it, so rank 1 saw a queued row and
resumed a checkpoint rank 0 had decided against.

How the decision travels, at a point where no process group exists yet (Lightning creates it later, in the
row's own process):

* under torchrun, through torchrun's own key-value store (``MASTER_ADDR:MASTER_PORT``, hosted by the agent,
  which outlives the ranks): no port of ours, nothing on disk, and no process group that could get in the
  way of the one the row's DDP creates later from the same store (under keys of its own);
* under ``srun`` without torchrun (no store to join), through a file rank 0 writes atomically into the
  table's run folder, named after the job step (``SLURM_JOB_ID``, ``SLURM_STEP_ID``, ``SLURM_RESTART_COUNT``),
  so a decision left by an earlier step is never read.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

from .._fs import write_atomic

#: how long a rank waits for rank 0's decision (rank 0 reads the state and writes the report first)
WAIT_SECONDS = 1800.0


def global_rank() -> int:
    """This process's global rank as torchrun / SLURM / Lightning set it (0 when alone)."""
    for var in ("RANK", "SLURM_PROCID", "GLOBAL_RANK"):
        value = os.environ.get(var)
        if value not in (None, ""):
            try:
                if var == "SLURM_PROCID" and int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
                    continue
                return int(value)
            except ValueError:
                continue
    return 0


def world_size() -> int:
    """How many processes run this command (torchrun's ``WORLD_SIZE``, SLURM's ``SLURM_NTASKS``; 1 when alone)."""
    for var in ("WORLD_SIZE", "SLURM_NTASKS"):
        try:
            return max(1, int(os.environ.get(var, "")))
        except ValueError:
            continue
    return 1


def _under_torchrun() -> bool:
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true" and bool(os.environ.get("MASTER_PORT"))


def share_decision(decision: dict | None, table_id: str, folder: Path, timeout_s: float = WAIT_SECONDS) -> dict:
    """Rank 0 passes its ``decision`` (JSON-able) and gets it back; every other rank passes None and gets rank
    0's. ``folder``: where the file handshake goes when there is no torchrun store (shared by every rank)."""
    rank = global_rank()
    if (rank == 0) != (decision is not None):
        raise ValueError("rank 0 shares a decision, the other ranks pass None")
    if world_size() <= 1:
        return decision
    if _under_torchrun():
        from torch.distributed import TCPStore

        store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
        key = f"dsf-reproduce/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{table_id}/decision"
        if rank == 0:
            store.set(key, json.dumps(decision))
            return decision
        return json.loads(store.get(key))
    step = [os.environ.get(v) or "0" for v in ("SLURM_STEP_ID", "SLURM_RESTART_COUNT")]
    step.insert(0, os.environ.get("SLURM_JOB_ID", ""))
    if not step[0]:
        raise RuntimeError("several ranks (RANK / WORLD_SIZE set) outside torchrun and SLURM: launch `dsf reproduce` "
                           "with torchrun or srun, or one process with --trainer.devices N")
    path = Path(folder) / f".decision-{table_id}-{'.'.join(step)}.json"
    if rank == 0:
        write_atomic(path, json.dumps(decision))
        return decision
    deadline = time.monotonic() + timeout_s
    while not path.is_file():  # written by rename: once there, it is whole
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: no decision from rank 0 in {path} after {timeout_s:.0f} s "
                               "(is the --out folder on a filesystem every node shares?)")
        time.sleep(0.5)
    return json.loads(path.read_text(encoding="utf-8"))
