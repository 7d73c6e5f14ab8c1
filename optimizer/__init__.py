"""Gridshift optimizer: Problem in, Plan out (pure library: stdlib, ortools, numpy, pandas)."""
