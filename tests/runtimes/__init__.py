"""Real cluster runtimes started on loopback for tests and benchmarks (Slurm, Ray)."""
