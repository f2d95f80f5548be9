"""Bounds on waiting for Kafka: how long a lost broker and a stuck consumer group are waited for.

librdkafka retries a lost broker for ever, and says so many times a second; a process that leaves it
at that neither recovers nor stops. ``BrokerWatch`` turns the client's errors into a bound: from the
first error saying the cluster cannot be reached, the process has ``timeout`` seconds to reach it
again (any round trip that succeeds: a metadata answer, a delivery, a commit) before ``check``
raises ``BrokerUnreachable``. ``AssignmentWatch`` bounds the wait for a consumer group to hand a
member its partitions: a group that never finishes its rebalance looks, from inside, like a quiet
topic. ``QuietRepeats`` keeps a flood of identical log lines to one per interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger(__name__)

UNREACHABLE = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE,
                         KafkaError._TIMED_OUT})
"""librdkafka's errors that say the cluster may not be reachable (not that it refused a request)."""

Clock = Callable[[], float]


class BrokerUnreachable(RuntimeError):
    """No broker of the cluster answered for the watch's whole bound."""

    def __init__(self, bootstrap: str, seconds: float, last_error: str = "") -> None:
        self.bootstrap, self.seconds, self.last_error = bootstrap, seconds, last_error
        because = f" (last error: {last_error})" if last_error else ""
        super().__init__(f"could not reach the Kafka broker at {bootstrap} for {seconds:.0f} s{because}")


class BrokerWatch:
    """Since when the cluster at ``bootstrap`` has not been reached, and the bound on that.

    A client reports to it through ``error_cb`` (its librdkafka setting) and ``failed``; whoever gets
    an answer from the cluster calls ``reached``. ``check`` raises once the cluster has been out of
    reach for ``timeout`` seconds; given a way to ask the cluster (``ask``), it first asks, at most
    every ``ask_every`` seconds, while the cluster is thought out of reach: an idle client has no
    other way to learn it is back. Errors come from the client's threads; only flags are shared."""

    def __init__(self, bootstrap: str, timeout: float = 60.0, ask_every: float = 1.0,
                 clock: Clock = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.ask_every = ask_every
        self.clock = clock
        self.unreachable_since: float | None = None
        self.last_error = ""
        self._asked_at = 0.0

    @property
    def suspect(self) -> bool:
        """Whether the cluster is thought out of reach now."""
        return self.unreachable_since is not None

    def unreachable_for(self) -> float:
        since = self.unreachable_since
        return 0.0 if since is None else self.clock() - since

    def error_cb(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb``: an error saying the cluster is out of reach starts the clock."""
        if error.code() in UNREACHABLE:
            self.failed(error.str())
        elif error.fatal():
            client_log.error("Kafka client error at %s (fatal): %s", self.bootstrap, error.str())
        else:
            client_log.warning("Kafka client error at %s: %s", self.bootstrap, error.str())

    def failed(self, why: str) -> None:
        """A request to the cluster failed for want of a connection."""
        self.last_error = why
        if self.unreachable_since is None:
            self.unreachable_since = self.clock()
            log.warning("cannot reach the Kafka broker at %s (%s): trying again for up to %.0f s",
                        self.bootstrap, why, self.timeout)

    def reached(self) -> None:
        """A round trip to the cluster succeeded."""
        since = self.unreachable_since
        if since is not None:
            self.unreachable_since = None
            log.warning("reached the Kafka broker at %s again after %.1f s", self.bootstrap, self.clock() - since)

    def check(self, ask: Callable[[], object] | None = None) -> None:
        """Raise ``BrokerUnreachable`` once the cluster has been out of reach for ``timeout`` seconds.
        While it is thought out of reach, ``ask`` (a bounded metadata request, say) is tried first,
        at most every ``ask_every`` seconds: an answer ends the wait."""
        since = self.unreachable_since
        if since is None:
            return
        now = self.clock()
        if ask is not None and now - self._asked_at >= self.ask_every:
            self._asked_at = now
            try:
                ask()
            except KafkaException as error:
                self.failed(error.args[0].str() if error.args else str(error))
            else:
                self.reached()
                return
        if self.clock() - since >= self.timeout:
            raise BrokerUnreachable(self.bootstrap, self.timeout, self.last_error)

    def reach(self, ask: Callable[[], object], stopped: Callable[[], bool]) -> bool:
        """Ask the cluster until it answers (True), ``stopped()`` holds (False), or it has been out of
        reach for the bound (``BrokerUnreachable``). ``ask`` must be bounded, so that a stop is seen:
        librdkafka's own waits do not see it."""
        while not stopped():
            try:
                ask()
            except KafkaException as error:
                if not unreachable(error):
                    raise
                self.failed(error.args[0].str())
                self.check()
            else:
                self.reached()
                return True
        return False

    def blame(self, error: Exception) -> None:
        """Raise ``BrokerUnreachable`` from ``error`` if the cluster is out of reach: a failed call is
        then the lost broker's doing, and that is the one line worth saying. Else return."""
        if self.suspect and not isinstance(error, BrokerUnreachable):
            raise BrokerUnreachable(self.bootstrap, self.unreachable_for(), self.last_error) from error


def unreachable(error: BaseException) -> bool:
    """Whether a Kafka call failed for want of a connection to the cluster."""
    return (isinstance(error, KafkaException) and bool(error.args) and isinstance(error.args[0], KafkaError)
            and error.args[0].code() in UNREACHABLE)


class NoAssignment(RuntimeError):
    """The consumer group did not assign this member its partitions within the bound."""


class AssignmentWatch:
    """How long a group member has waited for the group to assign it partitions.

    The member waits from when it subscribes, or its partitions are revoked or lost (a rebalance
    began), until the next assignment (empty or not: the group answered). Past ``timeout`` seconds
    ``check`` logs a warning naming the group, the bootstrap and the state directory, again every
    ``repeat_every`` seconds, or raises ``NoAssignment`` when the caller gives up."""

    def __init__(self, group: str, bootstrap: str, state_dir: Path, timeout: float = 60.0,
                 repeat_every: float = 300.0, clock: Clock = time.monotonic) -> None:
        self.group = group
        self.bootstrap = bootstrap
        self.state_dir = state_dir
        self.timeout = timeout
        self.repeat_every = repeat_every
        self.clock = clock
        self.waiting_since: float | None = None
        self.ever_assigned = False
        self._warned_at: float | None = None

    @property
    def waiting(self) -> bool:
        return self.waiting_since is not None

    def wait(self) -> None:
        """The member asked to join, or a rebalance took its partitions: it waits for an assignment."""
        if self.waiting_since is None:
            self.waiting_since = self.clock()
            self._warned_at = None

    def assigned(self) -> None:
        since = self.waiting_since
        if since is not None and self._warned_at is not None:
            log.warning("group %s assigned this worker its partitions after %.0f s", self.group, self.clock() - since)
        self.waiting_since = None
        self.ever_assigned = True

    def check(self, give_up: bool = False) -> None:
        """Past the bound: warn (at most every ``repeat_every`` s), or raise ``NoAssignment`` if ``give_up``."""
        since = self.waiting_since
        if since is None:
            return
        now = self.clock()
        waited = now - since
        if waited < self.timeout:
            return
        where = f"group {self.group} at {self.bootstrap} (state {self.state_dir})"
        if give_up:
            raise NoAssignment(f"{where} did not assign this worker its partitions within {self.timeout:.0f} s: "
                               "waiting for the group is not idleness, so the run failed")
        if self._warned_at is None or now - self._warned_at >= self.repeat_every:
            self._warned_at = now
            log.warning("%s has not assigned this worker its partitions for %.0f s: its rebalance does not "
                        "finish (a member that stopped polling holds it up, or the coordinator is unwell); "
                        "the worker keeps trying", where, waited)


class QuietRepeats(logging.Filter):
    """Lets a kind of warning through once, then at most once per ``every`` seconds, saying how many
    like it were held back. A kind is the logger, the level, the message's template and its first
    argument (librdkafka's facility, such as ``FAIL``). Records below WARNING, and records of loggers
    outside ``prefixes`` (all when empty), pass untouched."""

    def __init__(self, every: float = 30.0, prefixes: tuple[str, ...] = (), clock: Clock = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.prefixes = prefixes
        self.clock = clock
        self._kinds: dict[tuple[str, int, str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or (self.prefixes and not record.name.startswith(self.prefixes)):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        kind = (record.name, record.levelno, str(record.msg), str(args[0]) if args else "")
        now = self.clock()
        shown_at, held = self._kinds.get(kind, (None, 0))
        if shown_at is not None and now - shown_at < self.every:
            self._kinds[kind] = (shown_at, held + 1)
            return False
        if len(self._kinds) > 1000:  # kinds with an argument that never repeats: forget them all
            self._kinds.clear()
        self._kinds[kind] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it in the last {now - (shown_at or now):.0f} s)"
            record.args = ()
        return True


client_log = logging.getLogger(f"{__name__}.client")
"""The errors librdkafka reports that are not about reaching the cluster, one of a kind per 30 s."""
client_log.addFilter(QuietRepeats(every=30.0))
