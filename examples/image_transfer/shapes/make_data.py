"""Writes data/shapes/<class>/<n>.png: small pictures of discs, squares and bars on noisy backgrounds, the
folder layout Keras' image_dataset_from_directory reads. `python -m shapes.make_data [PER_CLASS] [SIZE]`."""

import sys
from pathlib import Path

import numpy as np
from PIL import Image


def picture(kind: str, size: int, rng) -> np.ndarray:
    pixels = rng.integers(0, 80, (size, size, 3), dtype=np.uint8)
    y, x = np.mgrid[:size, :size]
    cy, cx, r = rng.integers(size // 3, 2 * size // 3, 2).tolist() + [int(rng.integers(size // 6, size // 3))]
    inside = {"disc": (y - cy) ** 2 + (x - cx) ** 2 <= r * r,
              "square": (abs(y - cy) <= r) & (abs(x - cx) <= r),
              "bar": (abs(y - cy) <= max(1, r // 3)) & (abs(x - cx) <= r)}[kind]
    pixels[inside] = rng.integers(150, 256, 3, dtype=np.uint8)
    return pixels


def write(folder: Path, per_class: int = 40, size: int = 64, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for kind in ("bar", "disc", "square"):
        (folder / kind).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            Image.fromarray(picture(kind, size, rng)).save(folder / kind / f"{n:03d}.png")
    return folder


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(write(Path("data/shapes"), *args))
