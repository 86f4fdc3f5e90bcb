"""Simulation targets: collapse over depth on synthetic weights (masks, temperature, LayerNorm,
the depth table, the ablation)."""
