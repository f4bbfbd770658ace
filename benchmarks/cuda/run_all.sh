#!/usr/bin/env bash
# The whole GPU check of issue 37 (the fast GPU path), one command on a machine with a CUDA GPU, from the
# repository root:
#
#     bash benchmarks/cuda/run_all.sh          # about 6-10 minutes on one H200
#
# 1. tests/test_gpu_fast_path_cuda.py: every cell's training windows captured as CUDA graphs equal the eager
#    path and the reference in fp32 (values and gradients); cuDNN's LSTM on the lstm's parameters in fp32 / bf16;
# 2. python -m benchmarks --device cuda: part 1 at B=64, T=35, H=512 and 1024, every cell with the fast path on
#    and off side by side with cuDNN's nn.LSTM / nn.GRU, the issue's targets -> benchmarks/cuda/RESULTS.md,
#    results.csv, results.json;
# 3. dsf fit of recipes/ptb/delta_rnn_hub.yaml, training tokens/s with cuda_graphs on and off (the wall time of
#    STEPS_LONG minus STEPS_SHORT steps, so start-up, capture and the final validation cancel)
#    -> benchmarks/cuda/fit_tokens_per_s.md;
# 4. the device battery (tests/test_on_device.py, tests/test_benchmarks_device.py with DSF_TEST_DEVICE=cuda).
#
# Every step runs even if one before it failed; the exit status is 1 if any failed. Without a CUDA device it
# says so and exits 2 having run nothing. PYTHON (default .venv/bin/python if present, else python3) and
# DSF_DATA_ROOT (default ../shared/data beside the repository) may be set.
set -u
cd "$(dirname "$0")/../.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
export DSF_DATA_ROOT="${DSF_DATA_ROOT:-$(cd .. && pwd)/shared/data}"
OUT=benchmarks/cuda
STEPS_SHORT="${STEPS_SHORT:-20}" STEPS_LONG="${STEPS_LONG:-120}"

if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "run_all.sh: $PYTHON's torch sees no CUDA device here: nothing run (this is the GPU check of issue 37; run it on a GPU machine)" >&2
    exit 2
fi

MACHINE=$(mktemp)  # the machine record (CPU, ISA, cores, torch, oneDNN, load) from the start, for the report
"$PYTHON" -m dsf_lightning._machine start "$MACHINE"

failed=()
step() {  # step NAME COMMAND...: run it, remember a failure, go on
    local name="$1"; shift
    echo "== $name: $*"
    if ! "$@"; then failed+=("$name"); echo "== $name FAILED"; fi
}

step gpu-tests "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_gpu_fast_path_cuda.py
step benchmark "$PYTHON" -m benchmarks --device cuda --out "$OUT"

fit() {  # fit GRAPHS STEPS: wall seconds of dsf fit of the hub recipe for STEPS steps
    "$PYTHON" - "$@" <<'EOF'
import subprocess, sys, tempfile, time
graphs, steps = sys.argv[1], sys.argv[2]
options = "{inner: general, gate: data, outer_activation: identity, dropout: 0.5, cuda_graphs: %s}" % graphs
with tempfile.TemporaryDirectory() as root:
    cmd = [sys.executable, "-c", "import sys; from dsf_lightning.cli import main; sys.exit(main())", "fit",
           "--config", "recipes/ptb/delta_rnn_hub.yaml", "--trainer.max_steps", steps, "--trainer.max_time", "null",
           "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.default_root_dir", root,
           "--trainer.logger", "false", "--trainer.callbacks", "null", "--trainer.enable_checkpointing", "false",
           "--trainer.enable_progress_bar", "false", "--model.cell_options", options]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"{time.perf_counter() - t:.3f}")
EOF
}

fit_speed() {
    local rows="" graphs short long
    for graphs in true false; do
        short=$(fit "$graphs" "$STEPS_SHORT") && long=$(fit "$graphs" "$STEPS_LONG") || return 1
        rows+="| $graphs | $short | $long | $("$PYTHON" -c "print(f'{($STEPS_LONG - $STEPS_SHORT) * 64 * 35 / ($long - $short) / 1e3:.1f}')") |"$'\n'
    done
    {
        echo "# dsf fit of recipes/ptb/delta_rnn_hub.yaml on $("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name())'), $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "Written by \`bash benchmarks/cuda/run_all.sh\`. Training tokens/s = ($STEPS_LONG - $STEPS_SHORT) steps x 64 streams x 35 tokens"
        echo "over the wall-time difference of a $STEPS_LONG-step and a $STEPS_SHORT-step run (start-up, capture and the final validation cancel)."
        echo
        "$PYTHON" -m dsf_lightning._machine end "$MACHINE"
        echo
        echo "| cuda_graphs | s ($STEPS_SHORT steps) | s ($STEPS_LONG steps) | k tokens/s |"
        echo "| --- | --- | --- | --- |"
        printf "%s" "$rows"
    } > "$OUT/fit_tokens_per_s.md.tmp" && mv "$OUT/fit_tokens_per_s.md.tmp" "$OUT/fit_tokens_per_s.md" && cat "$OUT/fit_tokens_per_s.md"
}
step fit-tokens-per-s fit_speed

step device-battery env DSF_TEST_DEVICE=cuda "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_on_device.py tests/test_benchmarks_device.py

if [ ${#failed[@]} -gt 0 ]; then
    echo "run_all.sh: failed: ${failed[*]}" >&2
    exit 1
fi
echo "run_all.sh: all passed; results in $OUT/RESULTS.md and $OUT/fit_tokens_per_s.md"
