"""Finding the traces a change batch touched, among many recorded traces; and what recording a trace
adds to a `serve` request.

    python -m tests.benchmarks.bench_trace_replay [--traces N] [--nodes N] [--batches N] [--requests N]

**Finding.** Writes ``--traces`` traces (default 1,000,000) into a ledger store (their ``X`` rows) and
the trace index (``Z``/``W`` rows, three adjacencies each among ``--nodes`` services, as
``TraceIndex.rows`` writes them; the read sets are drawn, not derived by running a million queries,
which would measure the query engine). Then ``--batches`` times a change batch that closes 10
versions and appends 10 (on 10 random edges) is given to ``processors.trace_replay.touched_traces``
over the RocksDB index: the time to find and load every trace it touches and judge it affected.

**Recording.** Builds the API over a small ledger (in-process, ``TestClient``) and sends
``--requests`` owners-of requests without and with ``record=true&action=external_change``,
interleaved, after 200 unmeasured ones: p50/p99 of each (the trace goes to the file sink, as
`serve` without a broker does).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from processors.model import EdgeVersion, Trace
from processors.trace_replay import touched_traces
from state import codec
from state.keys import pack, unpack
from state.kv import RocksKV
from state.layout import DIRECTION
from state.store import LedgerStore
from state.trace_index import TraceIndex, trace_of, traces_using
from tests.benchmarks.stats import percentile

DAY = 86_400_000_000
T0 = 1_767_225_600_000_000  # 2026-01-01
RELS = (("depends_on", "in"), ("owned_by", "out"), ("depends_on", "out"))


def build(folder: Path, traces: int, nodes: int, seed: int) -> tuple[LedgerStore, TraceIndex, float]:
    rng = random.Random(seed)
    ledger_kv, index_kv = RocksKV(folder / "ledger", bulk=True), RocksKV(folder / "index", bulk=True)
    began = time.perf_counter()
    chunk: list[tuple[bytes, bytes]] = []
    rows: list[tuple[bytes, bytes]] = []
    for n in range(traces):
        known = T0 + rng.randrange(100) * DAY
        trace = Trace("acme", f"tr-{n:07d}", f"ev-{n}", {"name": "dependents-of", "entity": f"Service:s{n % nodes}"},
                      known, known, None, "external_change" if n % 3 == 0 else "none", known)
        chunk.append((b"X" + pack("acme", trace.trace_id), codec.encode_record(trace)))
        for _ in range(3):
            rel, d = RELS[rng.randrange(3)]
            rows.append((b"Z" + pack("acme", f"Service:s{rng.randrange(nodes)}", rel, DIRECTION[d], trace.trace_id),
                         b""))
        if len(chunk) >= 50_000:
            ledger_kv.write(chunk)
            index_kv.write(rows)
            chunk, rows = [], []
    ledger_kv.write(chunk)
    index_kv.write(rows)
    ledger_kv.close()
    index_kv.close()
    built = time.perf_counter() - began
    return LedgerStore(RocksKV(folder / "ledger")), TraceIndex(RocksKV(folder / "index")), built


def change_batch(rng: random.Random, nodes: int, n: int) -> list[EdgeVersion]:
    """``n`` versions closed and ``n`` appended, on ``n`` random depends_on edges, at day 150."""
    tx = T0 + 150 * DAY + n
    versions = []
    for i in range(n):
        src, dst = f"Service:s{rng.randrange(nodes)}", f"Service:s{rng.randrange(nodes)}"
        old = EdgeVersion(f"e-old-{i}", "acme", src, "depends_on", dst, None, None, T0, tx, "cmdb", None, None,
                          "", 1.0, f"e-old-{i}", (), "ev", None)
        versions += [old, old._replace(edge_id=f"e-new-{i}", tx_from=tx, tx_to=None)]
    return versions


def finding(traces: int, nodes: int, batches: int, seed: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="bench-trace-replay-"))
    try:
        store, index, built = build(folder, traces, nodes, seed)
        rng, timings, touched = random.Random(seed + 1), [], []
        for _ in range(batches + 20):
            versions = change_batch(rng, nodes, 10)
            began = time.perf_counter()
            found = touched_traces(versions, index.traces_reading, lambda t, e: traces_using(store, t, e),
                                   lambda t, i: trace_of(store, t, i), T0 + 200 * DAY)
            timings.append((time.perf_counter() - began) * 1000)
            touched.append(len(found))
        timings, touched = timings[20:], touched[20:]
        store.close()
        index.close()
        return {"traces": traces, "nodes": nodes, "build_s": round(built, 1), "batches": batches,
                "touched_mean": sum(touched) / len(touched), "p50_ms": percentile(timings, 0.5),
                "p99_ms": percentile(timings, 0.99), "max_ms": round(max(timings), 2)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def recording(requests: int) -> dict:
    from fastapi.testclient import TestClient

    from streams.api.http import create_app
    from streams.cli.load import load_into
    from tests.support.generate import generate_events

    folder = Path(tempfile.mkdtemp(prefix="bench-trace-record-"))
    try:
        events = folder / "events.jsonl"
        events.write_text("\n".join(generate_events(30_000, 3_000)) + "\n")
        load_into(folder / "state", [events], simulated_clock=True, ontology_path=None)
        kv = RocksKV(folder / "state", read_only=True)
        services = [str(unpack(k[1:])[-1]) for k, _ in kv.scan(b"E") if b"Service:" in k]
        kv.close()
        rng = random.Random(3)
        times: dict[str, list[float]] = {"plain": [], "recorded": []}
        with TestClient(create_app(folder / "state", cache_dir=folder / "cache")) as client:
            for n in range(requests + 200):
                for kind in (("plain", "recorded") if n % 2 else ("recorded", "plain")):
                    params = {"entity": rng.choice(services)}
                    if kind == "recorded":
                        params |= {"record": "true", "action": "external_change"}
                    began = time.perf_counter()
                    assert client.get("/v1/tenants/acme/owners-of", params=params).status_code == 200
                    if n >= 200:
                        times[kind].append((time.perf_counter() - began) * 1000)
        out = {f"{kind}_{q}_ms": percentile(values, p) for kind, values in times.items()
               for q, p in (("p50", 0.5), ("p99", 0.99))}
        out["p99_added_pct"] = round(100 * (out["recorded_p99_ms"] / out["plain_p99_ms"] - 1), 1)
        return {"requests": requests, **out}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps({"finding": finding(args.traces, args.nodes, args.batches, args.seed)}), flush=True)
    print(json.dumps({"recording": recording(args.requests)}), flush=True)


if __name__ == "__main__":
    main()
