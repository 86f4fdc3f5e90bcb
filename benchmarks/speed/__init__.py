"""Pieces of `benchmarks/simulate_speed.py`, one concept per module.

* `_hardware`: cores, CPU/device names, wall + process-CPU clocks, the measured matmul peak, versions;
* `_configs`: the reference configurations, their model FLOPs, the layer and inputs (JAX);
* `_rankdyn_child`: one rankdyn run (1 device or every core, default or mu-only metrics) in its own process;
* `_reference_torch`: the PyTorch eager loop computing the same metrics at the same layers;
* `_memory`: peak resident memory of `long` at two depths, one subprocess per depth;
* `_readme`: the table written into `benchmarks/HISTORY.md` between markers.
"""
