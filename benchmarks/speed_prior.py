"""The speed model as the GP's first guess, on the tuner tests' known surface: with it and without.

    python benchmarks/speed_prior.py [--seeds 6]

For each seed, the loop of ``tests/test_tuner_loop.py`` (40 decisions from a start about 8x slower than
the optimum) runs twice, ``speed_prior`` on and off, and prints: the decision that first ran a setting
within 10% of the optimum, the share of the online decisions after it within 10%, and the online
decisions' mean distance from the optimum (1.0 is the optimum). The surface is not of the speed model's
form (``tests/simulated.py``), so this measures what the first guess costs where it is only partly right.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import simulated as sim  # noqa: E402


def loop(seed: int, speed_prior: bool) -> tuple[int, float, float]:
    *_, ratios = sim.known_surface_loop(seed, 40, speed_prior=speed_prior)
    found = next((i for i, r in enumerate(ratios) if r <= 1.10), len(ratios))
    after = ratios[max(found, 10):] or [float("inf")]
    return found, sum(r <= 1.10 for r in after) / len(after), sum(ratios[10:]) / len(ratios[10:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    totals = {True: [], False: []}
    print("seed | with: found, within 10%, mean | without: found, within 10%, mean")
    for seed in range(args.seeds):
        row = {on: loop(seed, on) for on in (True, False)}
        for on in row:
            totals[on].append(row[on][2])
        print(f"{seed} | " + " | ".join(f"{row[on][0]}, {row[on][1]:.2f}, {row[on][2]:.3f}x" for on in (True, False)))
    print(f"mean distance of the online decisions: with {sum(totals[True]) / args.seeds:.3f}x, "
          f"without {sum(totals[False]) / args.seeds:.3f}x")


if __name__ == "__main__":
    main()
