"""Writes data/houses.csv: 600 houses (size, rooms, age, distance to the centre; price in thousands), a table
as a user's own would come, with a price that a model can learn. `python -m houses.make_data [ROWS]`."""

import csv
import random
import sys
from pathlib import Path


def write(path: Path, rows: int = 600, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        table = csv.writer(file)
        table.writerow(["size_m2", "rooms", "age_years", "km_to_centre", "price_k"])
        for _ in range(rows):
            size, rooms = rng.uniform(30, 220), rng.randint(1, 7)
            age, distance = rng.uniform(0, 90), rng.uniform(0.5, 40)
            price = 2.1 * size + 14 * rooms - 0.8 * age - 3.5 * distance + 120 + rng.gauss(0, 12)
            table.writerow([f"{size:.1f}", rooms, f"{age:.0f}", f"{distance:.2f}", f"{price:.1f}"])
    return path


if __name__ == "__main__":
    print(write(Path("data/houses.csv"), int(sys.argv[1]) if len(sys.argv) > 1 else 600))
