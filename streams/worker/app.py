"""The faust-streaming application that hosts a ledger worker.

faust-streaming owns the worker's lifecycle (start, stop, signals, crash propagation) and its
lower-rate duties: timers such as the freshness monitor. The resolve + version hot path is the
confluent-kafka batch loop of ``streams.worker.loop.LedgerWorker``, run as a faust service on its
own thread: measured on this machine, a faust agent tops out near 5,000 events/s, several times
slower than the batch loop. Timers are registered by the caller as ``(interval seconds, callable)``.

A stop is bounded. SIGTERM or SIGINT, the worker's end, a crash of the faust app, or a broker out of
reach for the worker's bound begins one, and the process ends within ``STOP_GRACE`` seconds of it
whatever librdkafka or faust still wait for (a lost broker, a rebalance that does not finish): what
has not stopped by then is named in the log and the process exits there (``Deadline``). Nothing
committed is lost that way: the worker's state holds every batch it committed, and its outbox the
records not yet confirmed sent, which the next run sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import faust
from mode import Service

from processors.pending import BatchCounts
from streams.kafka.liveness import BrokerUnreachable, NoAssignment, QuietRepeats
from streams.worker.loop import LedgerWorker

log = logging.getLogger(__name__)

Timer = tuple[float, Callable[[], None]]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE = 8.0
"""Seconds from the start of a stop to the process's end, at the most (a signal's stop ends within 10 s)."""
FAUST_STOP_SHARE = 1.5
"""Seconds of the grace kept for the faust app's own stop, after the worker's."""
FORCED_EXIT_CODE = 1
"""How a process whose stop the deadline ended exits, unless the worker had stopped cleanly by then (0)."""
SUPERVISE_EVERY = 0.2
"""Seconds between two looks at the broker's and the faust app's health, from the event loop."""
NOISY_LOGGERS = ("aiokafka", "faust", "mode")
"""Loggers whose repeated warnings are held to one per 30 s (aiokafka says a lost broker is lost many times
a second)."""
_OUR_PACKAGES = ("streams", "processors", "state", "schemas")
_ROOT = Path(__file__).resolve().parents[2]


class AppCrashed(RuntimeError):
    """The faust app crashed or failed to start: the process stops rather than lingering without it."""


def where_is(thread: threading.Thread) -> str:
    """Where a thread is now, by the innermost frames of edgeledger's own code (a blocking librdkafka call
    shows as the line that made it)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "nowhere (it has ended)"
    frames = traceback.extract_stack(frame)
    ours = [f for f in frames if _relative(f.filename) is not None] or frames[-1:]
    innermost = ours[-1]
    places = [f"{_relative(f.filename) or f.filename}:{f.lineno} {f.name}" for f in reversed(ours[-3:])]
    line = (innermost.line or "").strip()
    return f"{places[0]}{f' ({line})' if line else ''}, called from {', '.join(places[1:]) or 'its start'}"


def _relative(filename: str) -> str | None:
    try:
        relative = Path(filename).resolve().relative_to(_ROOT)
    except ValueError:
        return None
    return str(relative) if relative.parts and relative.parts[0] in _OUR_PACKAGES else None


class Deadline:
    """Ends the process ``grace`` seconds after a stop begins, if it has not ended by then: it logs what
    it was waiting for (where ``watched``, the worker's thread, is) and exits with ``exit_code``."""

    def __init__(self, grace: float, watched: Callable[[], threading.Thread | None]) -> None:
        self.grace = grace
        self.watched = watched
        self.exit_code = FORCED_EXIT_CODE
        self.why = ""
        self.waiting_for = "the worker"
        self._ends_at: float | None = None
        self._timer: threading.Timer | None = None

    @property
    def begun(self) -> bool:
        return self._ends_at is not None

    def begin(self, why: str) -> None:
        if self._ends_at is not None:
            return
        self.why = why
        self._ends_at = time.monotonic() + self.grace
        self._timer = threading.Timer(self.grace, self.expire)
        self._timer.daemon = True
        self._timer.name = "stop-deadline"
        self._timer.start()

    def remaining(self) -> float:
        return self.grace if self._ends_at is None else max(0.0, self._ends_at - time.monotonic())

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def expire(self) -> None:
        """Log what the stop still waits for, and exit the process now."""
        thread = self.watched()
        if thread is not None and thread.is_alive():
            stuck = f"the worker is still in {where_is(thread)}"
        else:
            stuck = f"the worker has stopped; {self.waiting_for} has not"
        took = self.grace - self.remaining()
        log.error("the stop (%s) has not ended after %.1f s: %s. Exiting now: the state keeps every batch the "
                  "worker committed, and its outbox the records not confirmed sent, which the next run sends",
                  self.why, took, stuck)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(self.exit_code)


class LedgerLoop(Service):
    """Runs the worker's batch loop on a thread of its own; stopping the service stops the loop.

    A daemon thread, not the event loop's executor: a worker held in a librdkafka call must not hold
    up the process's exit (``asyncio.run`` joins its executor's threads)."""

    def __init__(self, worker: LedgerWorker, idle_exit_after: float | None, finished: asyncio.Event,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.worker = worker
        self.idle_exit_after = idle_exit_after
        self.finished = finished
        self.stop_loop = threading.Event()
        self.totals: BatchCounts | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self._ended = asyncio.Event()

    async def on_start(self) -> None:
        self.thread = threading.Thread(target=self._run, args=(asyncio.get_running_loop(),), name="ledger-worker",
                                       daemon=True)
        self.thread.start()

    def _run(self, event_loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.totals = self.worker.run(self.stop_loop, self.idle_exit_after)
        except BaseException as error:
            self.error = error
            if isinstance(error, BrokerUnreachable | NoAssignment):
                log.error("ledger worker stopped: %s", error)
            else:
                log.exception("ledger worker failed")
        finally:
            with contextlib.suppress(RuntimeError):  # the event loop has closed: no one waits any more
                event_loop.call_soon_threadsafe(self._end)

    def _end(self) -> None:
        self._ended.set()
        self.finished.set()

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    async def stopped(self) -> None:
        """Returns once the worker's thread has ended (at once if it never started)."""
        if self.thread is not None:
            await self._ended.wait()

    async def on_stop(self) -> None:
        self.stop_loop.set()
        await self.stopped()


def build_app(bootstrap: str, state: Path, worker: LedgerWorker, idle_exit_after: float | None,
              timers: list[Timer], finished: asyncio.Event,
              stopping: threading.Event | None = None) -> tuple[faust.App, LedgerLoop]:
    app = faust.App(
        f"edgeledger-{worker.config.group_id}",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        web_enabled=False,
        datadir=str(state.parent / f".{state.name}.faust"),
        broker_session_timeout=6,
        broker_heartbeat_interval=2,
        topic_allow_declare=False,
    )
    ledger_loop = LedgerLoop(worker, idle_exit_after, finished, loop=asyncio.get_running_loop())
    app.add_dependency(ledger_loop)
    for interval, action in timers:
        app.timer(interval=interval)(_as_coroutine(action, stopping or threading.Event()))
    return app, ledger_loop


def _as_coroutine(action: Callable[[], None], stopping: threading.Event) -> Callable[[], Coroutine[Any, Any, None]]:
    """A faust timer that runs ``action`` on a daemon thread (one held up by the broker must not hold up
    the process's exit), none once the stop has begun. An error in it crashes the app."""
    async def tick() -> None:
        if stopping.is_set():
            return
        event_loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = event_loop.create_future()

        def settle(error: BaseException | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        def run() -> None:
            outcome: BaseException | None = None
            try:
                action()
            except BaseException as error:
                outcome = error
            with contextlib.suppress(RuntimeError):  # the event loop has closed
                event_loop.call_soon_threadsafe(settle, outcome)

        threading.Thread(target=run, name=f"timer-{getattr(action, '__name__', 'tick')}", daemon=True).start()
        await done

    tick.__name__ = getattr(action, "__name__", "timer")
    return tick


async def _supervise(app: faust.App, worker: LedgerWorker, starting: asyncio.Future[None], finished: asyncio.Event,
                     problems: list[BaseException]) -> None:
    """Stop the process when the broker has been out of reach for the worker's bound (the worker may be
    held in a librdkafka call that waits longer), or when the faust app crashed or failed to start."""
    while not finished.is_set():
        await asyncio.sleep(SUPERVISE_EVERY)
        problem: BaseException | None = None
        try:
            worker.broker.check()
        except BrokerUnreachable as unreachable:
            problem = unreachable
        if problem is None and app.crashed:
            problem = AppCrashed(f"the faust app crashed: {app.crash_reason!r}")
        if problem is None and starting.done() and not starting.cancelled() and starting.exception() is not None:
            problem = AppCrashed(f"the faust app did not start: {starting.exception()!r}")
        if problem is not None:
            log.error("%s: stopping", problem)
            problems.append(problem)
            finished.set()
            return


async def _within(awaitable: Awaitable[None], seconds: float) -> bool:
    """Await for at most ``seconds``; whether it finished."""
    try:
        await asyncio.wait_for(awaitable, max(0.0, seconds))
    except TimeoutError:
        return False
    except Exception as error:
        log.warning("stopping: %r", error)
    return True


async def _serve(bootstrap: str, state: Path, worker: LedgerWorker, idle_exit_after: float | None,
                 timers: list[Timer], grace: float) -> BatchCounts:
    event_loop = asyncio.get_running_loop()
    finished = asyncio.Event()
    stopping = threading.Event()
    app, ledger_loop = build_app(bootstrap, state, worker, idle_exit_after, timers, finished, stopping)
    deadline = Deadline(grace, lambda: ledger_loop.thread)
    problems: list[BaseException] = []

    def on_signal(sig: signal.Signals) -> None:
        if deadline.begun:
            log.warning("%s: already stopping, within %.1f s", sig.name, deadline.remaining())
            return
        log.warning("%s: stopping, within %.0f s", sig.name, grace)
        deadline.begin(sig.name)
        finished.set()

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        event_loop.add_signal_handler(sig, on_signal, sig)
    starting = asyncio.ensure_future(app.start())
    supervisor = asyncio.ensure_future(_supervise(app, worker, starting, finished, problems))
    try:
        await finished.wait()
    finally:
        deadline.begin(str(problems[0]) if problems else "the worker's end")
        stopping.set()
        ledger_loop.stop_loop.set()
        supervisor.cancel()
        if not await _within(ledger_loop.stopped(), deadline.remaining() - FAUST_STOP_SHARE):
            deadline.expire()
        clean = not problems and ledger_loop.error is None
        deadline.exit_code = 0 if clean else FORCED_EXIT_CODE
        deadline.waiting_for = "the faust app"
        if not starting.done():
            starting.cancel()
        app_stopped = await _within(app.stop(), deadline.remaining() - 0.5)
        if ledger_loop.running:  # started as the app's start was cut short
            await _within(ledger_loop.stopped(), deadline.remaining() - 0.2)
        if app_stopped and not ledger_loop.running:
            deadline.cancel()
        elif not app_stopped:
            # Its threads may hold up the interpreter's exit: the deadline, still set, ends the process.
            log.warning("the faust app did not stop in time (its clients wait for the broker at %s)", bootstrap)
        for sig in SIGNALS:
            event_loop.remove_signal_handler(sig)
            signal.signal(sig, previous[sig])
    if problems:
        raise problems[0]
    if ledger_loop.error is not None:
        raise ledger_loop.error
    return ledger_loop.totals or worker.totals


def run_app(bootstrap: str, state: Path, worker: LedgerWorker, idle_exit_after: float | None = None,
            timers: list[Timer] | None = None, grace: float = STOP_GRACE) -> BatchCounts:
    """Run the worker in its faust app until it ends, a signal stops it, the faust app crashes or the
    broker stays out of reach; a stop ends within ``grace`` seconds (see the module docstring)."""
    quiet = QuietRepeats(every=30.0, prefixes=NOISY_LOGGERS)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        return asyncio.run(_serve(bootstrap, state, worker, idle_exit_after, timers or [], grace))
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
