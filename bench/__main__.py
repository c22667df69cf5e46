"""Run the benchmarks (modules of bench/ with a main()), or the ones named:
`python -m bench [NAME...]`."""

import importlib
import pkgutil
import sys

import bench

names = sys.argv[1:] or sorted(
    m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_")
)
del sys.argv[1:]  # each benchmark parses its own flags; run this way it gets none
for name in names:
    main = getattr(importlib.import_module(f"bench.{name}"), "main", None)
    if main is not None:
        main()
