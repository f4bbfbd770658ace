"""dsf-lightning's benchmark suite: ``OMP_NUM_THREADS=1 python -m benchmarks [--quick] [--only N]``.

See :mod:`benchmarks.run`; the results land in ``benchmarks/RESULTS.md`` (+ ``results.csv`` / ``.json``).
"""
