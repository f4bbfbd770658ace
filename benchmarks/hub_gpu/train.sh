#!/bin/bash
# The hub's GPU runs (RESULTS.md): six `dsf fit` processes at once on one GPU, each stopped by its recipe's
# max_time (8 min 15 s), then the 128-stream character run resumed to 11 min 15 s (the bundled char model).
#   DSF_DATA_ROOT=/path/to/data bash benchmarks/hub_gpu/train.sh OUT
set -u
out=$(realpath -m "$1"); root=$(cd "$(dirname "$0")/../.." && pwd); mkdir -p "$out"
# the machine record (CPU, ISA, cores, torch, oneDNN, load at start and end) -> $out/machine.md
"${PY:-python3}" -m dsf_lightning._machine start "$out/machine.json" --own-processes 6
run() { local name=$1; shift; mkdir -p "$out/$name"
  (cd "$out/$name" && OMP_NUM_THREADS=2 dsf fit "$@" --trainer.enable_progress_bar false > log.txt 2>&1; echo "rc $?" >> log.txt) & }
run D64 --config "$root/recipes/ptb/delta_rnn_hub.yaml"
run L64 --config "$root/recipes/ptb/lstm_hub.yaml"
run D32 --config "$root/recipes/ptb/delta_rnn_hub.yaml" --data.batch_size 32 --model.lr 0.002
run L32 --config "$root/recipes/ptb/lstm_hub.yaml" --data.batch_size 32 --model.lr 0.002
run C128 --config "$root/recipes/ptb_char/delta_rnn_hub.yaml" --trainer.max_time 00:00:08:15
run C64 --config "$root/recipes/ptb_char/delta_rnn_hub.yaml" --data.batch_size 64 --trainer.max_time 00:00:08:15
wait
cd "$out/C128" && OMP_NUM_THREADS=2 dsf fit --config "$root/recipes/ptb_char/delta_rnn_hub.yaml" --trainer.enable_progress_bar false \
  --ckpt_path runs/ptb_char/delta_rnn_hub/checkpoints/best.ckpt > log2.txt 2>&1
"${PY:-python3}" -m dsf_lightning._machine end "$out/machine.json" > "$out/machine.md"
