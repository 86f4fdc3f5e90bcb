"""Targets on a trained checkpoint (geometry, pretrained ablation and temperature)."""
