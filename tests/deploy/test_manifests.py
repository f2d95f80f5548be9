"""The deploy manifests cannot run here (no Docker engine, no cluster); they must at least parse and
agree with the code: every topic the processes use, partition counts, retention, replication, the
commands they run and their options, the events the producer example sends, the ports."""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import typer.main
import yaml

from processors.batch import BatchRunner
from schemas.events import ClockEvent, validate_event_json
from schemas.ontology import default_ontology
from state.kv import MemoryKV
from state.store import LedgerStore
from streams.cli.main import app
from streams.kafka.produce import route
from streams.kafka.topics import LOGICAL_TOPICS, TopicSettings
from streams.processor import make_processor
from streams.worker.app import build_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CLI_COMMANDS = {command.name or command.callback.__name__ for command in app.registered_commands}
CLI = typer.main.get_command(app)


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def edgeledger_commands() -> list[list[str]]:
    commands = []
    compose = documents(DEPLOY / "compose.yaml")[0]
    commands += [s["command"] for s in compose["services"].values() if s.get("command", [None])[0] == "edgeledger"]
    for doc in documents(DEPLOY / "k8s" / "edgeledger.yaml"):
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            commands.append(container["command"])
    return commands


def compose_services() -> dict[str, dict]:
    return documents(DEPLOY / "compose.yaml")[0]["services"]


def topic_specs() -> dict[str, dict]:
    """topics.yaml's KafkaTopic specs by topic name."""
    return {doc["spec"]["topicName"]: doc["spec"] for doc in documents(DEPLOY / "k8s" / "topics.yaml")}


def option(command: list[str], flag: str) -> str | None:
    """The value a command gives ``flag``, or None."""
    return command[command.index(flag) + 1] if flag in command else None


def run_commands() -> list[list[str]]:
    return [command for command in edgeledger_commands() if command[1] == "run"]


def faust_topics(group: str) -> dict[str, int]:
    """The topics faust-streaming uses for the app of a worker in ``group`` (its name, partitions), read
    off the app ``streams.worker.app.build_app`` makes (never started): its leader election topic, and
    the changelogs of any tables. With topic_allow_declare=False the workers create none of them."""

    async def build() -> dict[str, int]:
        worker = SimpleNamespace(config=SimpleNamespace(group_id=group))
        faust_app, _ = build_app("kafka:9092", Path("/nonexistent/state"), worker, None, [],  # type: ignore[arg-type]
                                 asyncio.Event())
        assert not faust_app.agents, "an agent's topics must be listed in topics.yaml too"
        assert not faust_app.conf.topic_allow_declare, "the workers must not create topics behind topics.yaml"
        topics = {table.changelog_topic.get_topic_name(): table.partitions or 1 for table in faust_app.tables.values()}
        if not faust_app.conf.topic_disable_leader:
            leader = faust_app._leader_assignor._leader_topic  # type: ignore[attr-defined]
            topics[leader.get_topic_name()] = leader.partitions
        return topics

    return asyncio.run(build())


def test_topics_manifest_lists_every_topic_the_processes_use_and_no_other() -> None:
    """The cluster creates no topic itself, so a topic missing here is one a process waits for forever."""
    default_group = next(p.default for p in CLI.commands["run"].params if "--group" in p.opts)
    groups = {option(command, "--group") or default_group for command in run_commands()}
    assert groups == {"edgeledger-ledger"}
    faust = {name: partitions for group in groups for name, partitions in faust_topics(group).items()}
    assert "edgeledger-edgeledger-ledger-__assignor-__leader" in faust
    specs = topic_specs()
    assert set(specs) == {TopicSettings().name(t) for t in LOGICAL_TOPICS} | set(faust)
    for name, partitions in faust.items():
        assert specs[name]["partitions"] == partitions


def test_topics_manifest_matches_the_code() -> None:
    settings = TopicSettings()
    topics = topic_specs()
    assert set(topics) >= {settings.name(t) for t in LOGICAL_TOPICS}
    for logical in LOGICAL_TOPICS:
        spec = topics[settings.name(logical)]
        assert spec["partitions"] == settings.partitions_for(logical)
        assert int(spec["config"]["retention.ms"]) == settings.retention_for(logical)
        assert spec["config"]["max.message.bytes"] == settings.topic_config(logical)["max.message.bytes"]
        assert spec["config"]["cleanup.policy"] == settings.topic_config(logical)["cleanup.policy"]


def test_every_command_is_a_real_cli_command_with_the_default_prefix() -> None:
    commands = edgeledger_commands()
    assert {"run", "replica", "serve"} <= {command[1] for command in commands}
    for command in commands:
        assert command[1] in CLI_COMMANDS, command
        if "--topic-prefix" in command:
            assert command[command.index("--topic-prefix") + 1] == TopicSettings().prefix


def scrape_targets() -> dict[str, set[str]]:
    """Per edgeledger job of prometheus.yml, its targets as host:port (DNS-discovered ones by name)."""
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs: dict[str, set[str]] = {}
    for job in prometheus["scrape_configs"]:
        targets = {t for c in job.get("static_configs", []) for t in c["targets"]}
        targets |= {f"{name}:{c['port']}" for c in job.get("dns_sd_configs", []) for name in c["names"]}
        jobs[job["job_name"]] = targets
    return {name: targets for name, targets in jobs.items() if name.startswith("edgeledger-")}


def test_scrape_ports_match_prometheus_config() -> None:
    ports = {t.rsplit(":", 1)[1] for targets in scrape_targets().values() for t in targets}
    workloads = [doc for doc in documents(DEPLOY / "k8s" / "edgeledger.yaml")
                 if doc["kind"] in ("StatefulSet", "Deployment")]
    annotations = [doc["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] for doc in workloads]
    assert set(annotations) <= ports



def test_prometheus_reaches_the_workers_and_the_api_by_their_compose_service_names() -> None:
    """Workers listen for scrapes beyond their own container, and prometheus.yml names the services
    compose runs, not localhost (which, inside Prometheus's container, is Prometheus)."""
    compose = compose_services()
    assert run_commands()
    for command in run_commands():
        assert option(command, "--metrics-host") == "0.0.0.0", command
    for job, targets in scrape_targets().items():
        hosts = {target.rsplit(":", 1)[0] for target in targets}
        assert hosts and hosts <= set(compose), (job, hosts)
    serve = compose["query-api"]["command"]
    assert f"query-api:{serve[serve.index('--port') + 1]}" in scrape_targets()["edgeledger-serve"]


# -- replication ----------------------------------------------------------------------------------------------------
def test_workers_topics_and_brokers_agree_on_replication() -> None:
    """Three replicas, two in sync: a write is acknowledged by two brokers and one broker may be down.
    The workers' flags, every topic of topics.yaml and compose's brokers all say so."""
    services = compose_services()
    brokers = [service for name, service in services.items() if name.startswith("kafka-")]
    specs = topic_specs().values()
    assert run_commands()
    for command in run_commands():
        replication = int(option(command, "--replication-factor") or 0)
        min_insync = int(option(command, "--min-insync-replicas") or 0)
        settings = TopicSettings(replication_factor=replication, min_insync_replicas=min_insync)
        assert 1 <= min_insync < replication <= len(brokers), command
        assert {spec["replicas"] for spec in specs} == {replication}
        assert {spec["config"]["min.insync.replicas"] for spec in specs} == {
            settings.topic_config(t)["min.insync.replicas"] for t in LOGICAL_TOPICS}
        for broker in brokers:
            environment = broker["environment"]
            assert int(environment["KAFKA_MIN_INSYNC_REPLICAS"]) == min_insync
            assert int(environment["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == replication
            assert environment["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_every_option_a_manifest_gives_is_one_its_command_takes() -> None:
    for command in edgeledger_commands():
        taken = {flag for parameter in CLI.commands[command[1]].params for flag in parameter.opts}
        given = {argument for argument in command[2:] if argument.startswith("--")}
        assert given <= taken, (command[1], sorted(given - taken))


# -- compose's one-shot services: the topics, and the producer example ----------------------------------------------
def host_path(service: dict, container_path: str) -> Path:
    """Where a file a compose service reads in its container is in deploy/, through its bind mounts."""
    wanted = PurePosixPath(container_path)
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith(".") and wanted.is_relative_to(target):
            return DEPLOY / source / wanted.relative_to(target)
    raise AssertionError(f"{container_path} is in no bind mount of {service}")


def test_compose_creates_the_topics_before_any_edgeledger_process_starts() -> None:
    services = compose_services()
    topics = services["topics"]
    script, listing = (host_path(topics, argument) for argument in topics["command"][1:3])
    assert script == DEPLOY / "create_topics.py" and listing.resolve() == (DEPLOY / "k8s" / "topics.yaml").resolve()
    for name, service in services.items():
        if service.get("command", [None])[0] == "edgeledger" and name != "query-api":  # the API reads a volume
            assert service["depends_on"] == {"topics": {"condition": "service_completed_successfully"}}, name
    assert services["query-api"]["depends_on"] == ["query-replica"]


def test_the_producer_example_sends_only_events_run_applies() -> None:
    """`run` applies what `produce` sends with the wall clock: a `clock` event is dead-lettered there."""
    producer = compose_services()["producer"]
    command = producer["command"]
    assert command[:2] == ["edgeledger", "produce"]
    files = [host_path(producer, argument) for argument in command[2:] if argument.endswith(".jsonl")]
    lines = [line for path in files for line in path.read_bytes().splitlines() if line.strip()]
    assert lines
    for line in lines:
        event = validate_event_json(line)
        assert not isinstance(event, ClockEvent), line
        topic, key = route(line)
        assert topic in LOGICAL_TOPICS and key == event.tenant.encode()
    store = LedgerStore(MemoryKV())
    counts = BatchRunner(make_processor(default_ontology(), simulated_clock=False), store, store.commit).run(lines)
    assert counts.events_read == len(lines) and counts.dead_lettered == 0 and counts.balanced(), counts
