"""houses: a tabular regression project of one's own (made with `tfx-hydra init`, then grown)."""
