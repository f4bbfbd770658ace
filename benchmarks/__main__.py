from .run import main

raise SystemExit(main())  # a failed run (a time-to-quality contender that failed) exits non-zero
