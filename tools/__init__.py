"""Developer tools that build and demo the mixin; run with `python -m tools.NAME`."""
