#!/bin/bash
# per-token learning curves of budget-recipe variants (benchmarks/budget_sweep/variants/*.yaml over the recipe), all at once on the GPU
out=$1; root=$PWD; mkdir -p $out
# the machine record (CPU, ISA, cores, torch, oneDNN, load at start and end) -> $out/machine.md, into the tgz
${PY:-python3} -m dsf_lightning._machine start $out/machine.json --own-processes $(ls $root/benchmarks/budget_sweep/variants/*.yaml | wc -l)
for v in $root/benchmarks/budget_sweep/variants/*.yaml; do
  k=$(basename $v .yaml); mkdir -p $out/$k
  (cd $out/$k && OMP_NUM_THREADS=1 timeout ${2:-290} ${PY:-python3} -m dsf_lightning.cli fit --config $root/recipes/ptb/delta_rnn_budget.yaml \
     --config $v --trainer.max_epochs 8 --trainer.max_time ${3:-00:00:04:00} --trainer.enable_progress_bar false > log.txt 2>&1; echo "rc $?" >> log.txt) &
done
wait
${PY:-python3} -m dsf_lightning._machine end $out/machine.json > $out/machine.md
cd $out && tar czf ../sweep.tgz machine.md $(find . -name metrics.csv -o -name log.txt)
