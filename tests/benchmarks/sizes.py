"""Benchmark sizes: ``--quick`` for a smoke run, the full sizes otherwise, either overridden per flag."""

from __future__ import annotations

import argparse


def fill_sizes(args: argparse.Namespace, quick: dict[str, int], full: dict[str, int]) -> argparse.Namespace:
    """Set every size flag the command line left out (``None``) from ``quick`` or ``full``, as ``--quick`` says."""
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args
