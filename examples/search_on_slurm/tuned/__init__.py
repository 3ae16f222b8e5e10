"""tuned: a model of one's own, searched on a Slurm cluster (made with `tfx-hydra init`, then grown)."""
