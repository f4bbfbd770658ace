"""The sizes every part runs at: the full suite, ``--quick`` (a smoke run, under a minute) and
``--tiny`` (the test suite's run: smallest sizes, the numbers mean nothing)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

#: the corpora: $DSF_DATA_ROOT, else ``../shared/data`` beside the repository (where the project keeps them)
DEFAULT_DATA_ROOT = str(Path(__file__).resolve().parents[2] / "shared" / "data")


@dataclasses.dataclass
class Settings:
    mode: str = "full"  # "full" | "quick" | "tiny"
    device: str = "cpu"  # where the parts that take a device (DEVICE_PARTS in run.py) run: "cpu" or "cuda[:N]"
    data_root: str = dataclasses.field(default_factory=lambda: os.environ.get("DSF_DATA_ROOT") or DEFAULT_DATA_ROOT)
    # part 1: cells vs nn.LSTM / nn.GRU, forward + backward
    batch: int = 64
    bptt: int = 35
    cell_hidden: tuple[int, ...] = (256, 512, 1024)
    cell_rounds: int = 5
    cell_compiled: tuple[str, ...] = ()  # cells also timed through torch.compile (run.py: delta-rnn on CUDA)
    compile_backend: str = "inductor"  # --tiny: "eager" (the code path without minutes of code generation)
    compile_mode: str = "default"  # torch.compile's mode for cell_compiled ("reduce-overhead": CUDA graphs)
    cell_fast_path_off: bool = False  # also time every cell with its fast GPU path off (run.py: on CUDA)
    # part 2: recurrent matmul GFLOP/s against the measured peak
    flops_hidden: tuple[int, ...] = (512, 1024)
    flops_rounds: int = 5
    matmul_square: int = 2048
    decoder_shape: tuple[int, int, int] = (2240, 512, 10_000)  # B*T, H, V
    # part 3: Lightning loop vs a hand-written loop, real PTB
    lm_hidden: int = 256
    lm_batch: int = 32
    lm_steps: int = 40  # timed steps per run
    lm_warmup_steps: int = 5  # steps before the clock starts (in the same run)
    lm_rounds: int = 5
    lm_warmup_runs: int = 1  # untimed runs of each loop first
    allocator_rounds: int = 2  # fresh-process runs with / without the module's malloc tuning
    # part 4: the scorer
    score_sentences: int = 1000
    score_batch_sizes: tuple[int, ...] = (32, 128)
    score_rounds: int = 3
    memory_tokens: tuple[int, int] = (10_000, 1_000_000)
    # part 5: parallel scans vs their loops
    scan_lengths: tuple[int, ...] = (35, 256, 1024)
    # (B, H) configurations: the LM size, and a small one whose [B, T, H] tensors stay in the caches
    scan_shapes: tuple[tuple[int, int], ...] = ((64, 512), (8, 64))
    scan_rounds: int = 5
    # part 6: text generation
    gen_tokens: int = 200
    gen_batch_sizes: tuple[int, ...] = (1, 8)
    gen_rounds: int = 3
    # part 7: torch.compile vs uncompiled (lm_hidden, lm_batch, bptt as above)
    compile_vocab: int = 10_000
    compile_cells: tuple[str, ...] = ("delta-rnn", "lstm")
    compile_rounds: int = 5
    # part 8: scoring a long document, exact vs parallel mode (score-document)
    sdoc_lines: int | None = None  # PTB test's first lines only (None: all of it)
    sdoc_streams: int = 32  # the parallel mode timed side by side with the exact one
    sdoc_warmup: int = 64
    sdoc_rounds: int = 3
    sdoc_grid: tuple[tuple[int, int], ...] = tuple((S, W) for S in (4, 16, 32, 64) for W in (0, 16, 64, 256))
    sdoc_long_grid: tuple[tuple[int, int], ...] = ((16, 0), (16, 64), (32, 0), (32, 64), (64, 0), (64, 64))  # wikitext-2 test

    @classmethod
    def for_mode(cls, mode: str, **overrides) -> Settings:
        s = cls(mode=mode)
        if mode == "quick":
            s = dataclasses.replace(
                s, cell_hidden=(256,), cell_rounds=2, flops_hidden=(512,), flops_rounds=1, matmul_square=1024,
                decoder_shape=(700, 256, 10_000), lm_steps=6, lm_warmup_steps=2, lm_rounds=2,
                lm_warmup_runs=0, allocator_rounds=0,
                score_sentences=100, score_batch_sizes=(32,), score_rounds=1, memory_tokens=(10_000, 30_000),
                scan_lengths=(35, 256), scan_rounds=2, gen_tokens=50, gen_rounds=1,
                compile_cells=("delta-rnn",), compile_rounds=2,
                sdoc_lines=500, sdoc_rounds=1, sdoc_grid=((16, 64), (64, 64)), sdoc_long_grid=(),
            )
        elif mode == "tiny":
            s = dataclasses.replace(
                s, batch=4, bptt=6, cell_hidden=(16,), cell_rounds=1, flops_hidden=(16,), flops_rounds=1,
                matmul_square=64, decoder_shape=(24, 16, 100), lm_hidden=16, lm_batch=4, lm_steps=3,
                lm_warmup_steps=1, lm_rounds=1, lm_warmup_runs=0, allocator_rounds=0, score_sentences=8, score_batch_sizes=(4,), score_rounds=1,
                memory_tokens=(500, 2_000), scan_lengths=(8,), scan_shapes=((2, 8),), scan_rounds=1,
                gen_tokens=4, gen_batch_sizes=(1, 2), gen_rounds=1,
                compile_vocab=100, compile_cells=("delta-rnn",), compile_rounds=1,
                sdoc_lines=12, sdoc_streams=3, sdoc_warmup=4, sdoc_rounds=1, sdoc_grid=((2, 0), (3, 4)),
                sdoc_long_grid=(),
            )
        elif mode != "full":
            raise ValueError(f"mode must be full, quick or tiny, got {mode!r}")
        return dataclasses.replace(s, **overrides)
