"""Source trees compared side by side: each benchmark child runs one checkout's code, in ABBA order."""

from __future__ import annotations

import os
from pathlib import Path


def parse_trees(argument: str) -> list[Path]:
    """``--trees DIR,DIR...`` as resolved paths."""
    return [Path(tree).resolve() for tree in argument.split(",")]


def in_round_order(trees: list[Path], round_no: int) -> list[Path]:
    """a, b in even rounds, b, a in odd ones: neither tree always runs first on a drifting machine."""
    return trees if round_no % 2 == 0 else trees[::-1]


def tree_environment(tree: Path) -> dict[str, str]:
    """The environment of a child that imports ``tree``'s packages (and its compiled core, if built)."""
    return {**os.environ, "PYTHONPATH": str(tree)}
