"""The `edgeledger` command line. Errors are one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from processors.traversal import PlanRefused
from schemas.config_files import validation_summary
from streams.cli import (
    agent_commands,
    broker_command,
    pipeline_commands,
    read_commands,
    review_commands,
    trace_commands,
)
from streams.cli.adapt import adapt_app
from streams.cli.eval_commands import eval_app
from streams.cli.freshness import freshness_app
from streams.cli.generate import generate
from streams.cli.identity_commands import identity_app
from streams.cli.options import CliError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help=(
        "edgeledger keeps a knowledge graph bi-temporally: valid time (when a fact held in the world) "
        "and transaction time (when the ledger believed it), and answers bounded relationship "
        "questions as of any pair of the two.\n\n"
        "Start with `edgeledger demo`, then try `edgeledger query owners-of --state demo-state "
        "--tenant acme --entity 'settlement connector'`."
    ),
)
review_app = typer.Typer(no_args_is_help=True, help="The review queue: parked events and flagged conflicts.")
traces_app = typer.Typer(no_args_is_help=True, help="Recorded agent answers (traces).")

app.command()(pipeline_commands.load)
app.command()(read_commands.query)
app.command()(read_commands.history)
app.command()(read_commands.corrections)
review_app.command("list")(read_commands.review_list)
review_app.command("decide")(review_commands.review_decide)
traces_app.command("affected")(read_commands.traces_affected)
traces_app.command("replay")(trace_commands.traces_replay)
traces_app.command("show")(trace_commands.traces_show)
traces_app.command("list")(trace_commands.traces_list)
app.command("replay-agent")(trace_commands.replay_agent)
app.command("dead-letters")(read_commands.dead_letters)
app.command()(pipeline_commands.run)
app.command()(pipeline_commands.serve)
app.command()(agent_commands.mcp)
app.command()(pipeline_commands.replica)
app.command()(pipeline_commands.produce)
app.command()(pipeline_commands.demo)
app.command()(broker_command.broker)
app.command("ontology")(read_commands.show_ontology)
app.add_typer(review_app, name="review")
app.add_typer(traces_app, name="traces")
app.add_typer(freshness_app)
app.add_typer(adapt_app, name="adapt")
app.add_typer(eval_app, name="eval")
app.add_typer(identity_app, name="identity")
app.command()(generate)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except typer.Exit as done:
        raise SystemExit(done.exit_code) from None
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("edgeledger: aborted\n")
        raise SystemExit(130) from None
    except Exception as error:
        sys.stderr.write(f"edgeledger: error: {_describe(error)}\n")
        raise SystemExit(2) from None
    if isinstance(code, int) and code:  # a command's typer.Exit(n), returned outside standalone mode
        raise SystemExit(code)


def _describe(error: Exception) -> str:
    format_message = getattr(error, "format_message", None)
    if callable(format_message):
        return f"{format_message()} (see --help)"
    if isinstance(error, ValidationError):
        # Pydantic's first line is only "N validation errors for Model": name each field and its message.
        return f"invalid {error.title}: {validation_summary(error)}"
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "lock" in message.lower() and "LOCK" in message:
        return f"the state directory is locked by another writer ({message})"
    if isinstance(error, (CliError, PlanRefused, ValueError, FileNotFoundError, PermissionError,
                          NotADirectoryError, IsADirectoryError, FileExistsError)):
        return message
    return f"{type(error).__name__}: {message}"


if __name__ == "__main__":
    main()
