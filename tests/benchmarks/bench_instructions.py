"""Instructions per event on the loading thread, counted by valgrind: a figure the machine's noise cannot move.

    python -m tests.benchmarks.bench_instructions [--events N] [--warm W] [--entities E] [--file F]

Wall-clock and CPU rates on this shared machine swing by 10-25 % between runs minutes apart, more than
most single changes to the ledger. Instruction counts barely do: two runs of the same code agree to
about 0.2 % (RocksDB's background threads meet the loading thread at other moments; run nothing
heavy beside it, one run alongside the test suite was 2 % off). So a change is judged here first,
then confirmed by interleaved timings.

``--warm W`` events of ``tests.support.generate`` (default 0) are loaded first, under valgrind
but not instrumented (about 5x slower than native), then the next ``--events N`` (default 20,000)
are loaded by the same processor into the same store, instrumented (about 50x slower). ``--file F``
counts the load of a ready events file into a new state instead. Counting
starts and stops with ``BatchRunner.run``'s compiled function, so only the loading thread's
instructions are counted, not RocksDB's flush and compaction threads. Needs valgrind (Debian
package ``valgrind``) and the compiled core (``./dev`` builds it in place).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from processors import native
from tests.support.generate import generate_events

RUN_SYMBOL = "CPyDef_batch___BatchRunner___run"
"""The compiled ``BatchRunner.run``: callgrind counts only while the loading thread is inside it."""


def measured_load(warm_file: str, events_file: str, state: str, signal_on: str) -> None:
    """Run inside valgrind: load the warm-up events, switch instrumentation on, load the measured ones."""
    from processors.batch import BatchRunner
    from schemas.ontology import default_ontology
    from state.open import open_writer
    from streams.processor import make_processor

    store = open_writer(Path(state), bulk=True)
    processor = make_processor(default_ontology(), simulated_clock=True)

    def lines(path: str):
        with open(path, "rb") as file:
            yield from file

    if os.path.getsize(warm_file):
        BatchRunner(processor, store, store.commit).run(lines(warm_file))
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    Path(signal_on).write_text("on")
    counts = BatchRunner(processor, store, store.commit).run(lines(events_file))
    store.close()
    print(counts.events_read, counts.versions_appended, counts.versions_closed, counts.balanced())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="events counted (default 20,000)")
    parser.add_argument("--warm", type=int, default=0, help="events loaded first, not counted (default 0)")
    parser.add_argument("--entities", type=int, default=100_000, help="entities of the generated history")
    parser.add_argument("--file", type=Path, help="count the load of this events file instead, into a new state")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench_instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    if len(native.compiled_modules()) != len(native.COMPILED):
        print(f"bench_instructions counts the compiled core, and this checkout runs: {native.describe()}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="edgeledger-instructions-") as folder:
        work = Path(folder)
        if args.file is not None:
            (work / "warm.jsonl").write_text("")
            shutil.copyfile(args.file, work / "events.jsonl")
        else:
            history = list(generate_events(args.warm + args.events, args.entities))
            # Clock events count as lines: split after the warm-up's share of change events.
            changes = [index for index, line in enumerate(history) if '"kind": "clock"' not in line]
            cut = changes[args.warm] if args.warm else 0
            (work / "warm.jsonl").write_text("".join(line + "\n" for line in history[:cut]))
            (work / "events.jsonl").write_text("".join(line + "\n" for line in history[cut:]))
        out = work / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--toggle-collect={RUN_SYMBOL}",
                   f"--callgrind-out-file={out}", sys.executable, "-m", "tests.benchmarks.bench_instructions",
                   "--inside", str(work / "warm.jsonl"), str(work / "events.jsonl"), str(work / "state"),
                   str(work / "on")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        collected = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or collected is None or not (work / "on").exists():
            print(f"valgrind run failed ({done.returncode}):\n{done.stderr[-3000:]}", file=sys.stderr)
            return 1
        events, appended, closed, balanced = done.stdout.split()[-4:]
        instructions = int(collected.group(1))
        print(f"{int(events):,} events after {args.warm:,} warm-up events: {instructions:,} instructions on the "
              f"loading thread, {instructions / int(events):,.0f} per event "
              f"({appended} versions appended, {closed} closed, balanced {balanced})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--inside":
        measured_load(*sys.argv[2:])
    else:
        sys.exit(main())
