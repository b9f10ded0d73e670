"""Launchers: Cloud TPU VM pods, SLURM GPU clusters, and local multi-process jobs. Each has --dry-run."""
