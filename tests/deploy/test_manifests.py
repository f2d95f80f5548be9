"""The deploy manifests cannot run here (no Docker engine, no cluster); they must at least parse and
agree with the code: topic names, partition counts, retention, the commands they run, the ports."""

from pathlib import Path

import yaml

from streams.cli.main import app
from streams.kafka.topics import LOGICAL_TOPICS, TopicSettings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CLI_COMMANDS = {command.name or command.callback.__name__ for command in app.registered_commands}


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


def test_topics_manifest_matches_the_code() -> None:
    settings = TopicSettings()
    topics = {doc["spec"]["topicName"]: doc["spec"] for doc in documents(DEPLOY / "k8s" / "topics.yaml")}
    assert set(topics) == {settings.name(t) for t in LOGICAL_TOPICS}
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
    compose = documents(DEPLOY / "compose.yaml")[0]["services"]
    for command in edgeledger_commands():
        if command[1] == "run":
            assert command[command.index("--metrics-host") + 1] == "0.0.0.0", command
    for job, targets in scrape_targets().items():
        hosts = {target.rsplit(":", 1)[0] for target in targets}
        assert hosts and hosts <= set(compose), (job, hosts)
    serve = compose["query-api"]["command"]
    assert f"query-api:{serve[serve.index('--port') + 1]}" in scrape_targets()["edgeledger-serve"]
