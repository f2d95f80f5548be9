"""The command line run in this process, as its console script runs it (``main``), for tests that compare
its output with another interface's."""

import contextlib
import io
import subprocess
import sys
from unittest import mock

from streams.cli.main import main


def edgeledger(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``edgeledger ARGS`` through the console script's entry point (``main``) in this process: its exit
    status, standard output and standard error, as ``edgeledger_process`` gives them. A process costs a
    third of a second of start-up and this module runs seventy commands; the tests that start one
    (the loads of the module fixtures, --help, the Kafka-side refusals, ``test_a_command_is_one_process``)
    keep what only a whole process shows: its imports, its interpreter's warnings, ``python -m``."""
    out, err = io.StringIO(), io.StringIO()
    returncode = 0
    with mock.patch.object(sys, "argv", ["edgeledger", *args]), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exited:
            returncode = exited.code if isinstance(exited.code, int) else int(exited.code is not None)
    done = subprocess.CompletedProcess(["edgeledger", *args], returncode, out.getvalue(), err.getvalue())
    if check and done.returncode != 0:
        raise AssertionError(done.stderr)
    return done
