"""Run every benchmark module (or the ones named) in turn: `python -m bench [NAME...]`."""
import importlib
import pkgutil
import sys

import bench

names = sys.argv[1:] or sorted(m.name for m in pkgutil.iter_modules(bench.__path__)
                               if not m.name.startswith("_"))
for name in names:
    importlib.import_module(f"bench.{name}").main()
