"""Session Core benchmarks (``make bench`` / ``python -m bench``): every hot path as a ratio
against a baseline measured in the same run. See docs/benchmarks.md."""
