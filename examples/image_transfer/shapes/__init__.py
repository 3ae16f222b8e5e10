"""shapes: an image classifier by transfer learning, of one's own (made with `tfx-hydra init`, then grown)."""
