"""reviews: a text classifier of one's own (made with `tfx-hydra init`, then grown)."""
