"""Writes data/reviews/<class>/<n>.txt: short product reviews in three classes, the folder layout Keras'
text_dataset_from_directory reads. `python -m reviews.make_data [PER_CLASS]`."""

import random
import sys
from pathlib import Path

WORDS = {
    "negative": ["broken", "refund", "awful", "late", "cracked", "useless", "disappointed", "returned"],
    "neutral": ["arrived", "box", "colour", "size", "manual", "ordered", "delivery", "package"],
    "positive": ["great", "love", "excellent", "perfect", "recommend", "sturdy", "happy", "works"],
}
FILLER = ["the", "it", "was", "and", "this", "my", "very", "with", "a", "for"]


def write(folder: Path, per_class: int = 60, seed: int = 0) -> Path:
    rng = random.Random(seed)
    for label, words in WORDS.items():
        (folder / label).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            review = [rng.choice(words if rng.random() < 0.4 else FILLER) for _ in range(rng.randint(6, 16))]
            (folder / label / f"{n:03d}.txt").write_text(" ".join(review).capitalize() + ".\n")
    return folder


if __name__ == "__main__":
    print(write(Path("data/reviews"), int(sys.argv[1]) if len(sys.argv) > 1 else 60))
