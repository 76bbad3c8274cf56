"""TrainGuard: keeps distributed training on Slurm running."""

__version__ = "0.1.0"
