"""`edgeledger broker`: the embedded broker on its own, in the foreground, for several commands to share."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated

import orjson
import typer

from streams.cli.options import CliError


class BrokerStorage(StrEnum):
    """Where the embedded broker keeps topics, records and offsets."""

    disk = "disk"
    memory = "memory"


BrokerStorageOption = Annotated[BrokerStorage, typer.Option(
    "--broker-storage", help="disk: the embedded broker keeps its data in --broker-dir across restarts; "
                             "memory: it loses everything when it stops.")]


def broker(
    directory: Annotated[Path, typer.Option(
        "--dir", help="Data directory: topics, records and committed offsets (disk), the lock and the logs.")],
    port: Annotated[int | None, typer.Option(
        "--port", min=1, max=65535, help="Port on 127.0.0.1. Default: a free one.")] = None,
    storage: Annotated[BrokerStorage, typer.Option(
        "--storage", help="disk: keep the data in --dir across restarts; memory: lose it when stopped.")]
    = BrokerStorage.disk,
) -> None:
    """Run the embedded Kafka broker in the foreground for `produce`, `run --bootstrap`, `replica` and `serve`
    to share; print one JSON line with its bootstrap address; stop on Ctrl-C or SIGTERM."""
    from streams.kafka.broker import EmbeddedBroker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with EmbeddedBroker(storage=storage.value, data_dir=directory, port=port) as running:
            line = {"bootstrap": running.bootstrap, "storage": storage.value, "dir": str(running.data_dir),
                    "log": str(running.log_path), "consumer_options": running.consumer_overrides}
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
            sys.stdout.flush()
            while not stopping.wait(0.5):
                if not running.running:
                    raise CliError(f"the embedded broker exited; see its log: {running.log_path}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
