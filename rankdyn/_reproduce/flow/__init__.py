"""Continuous-time flow targets (clustering, metastability, causal, the discrete-to-flow limit)."""
