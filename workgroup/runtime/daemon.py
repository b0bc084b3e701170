"""Running an app as a process: signals, exit codes, importing ``module:app``.

Rules:

1. The first SIGINT or SIGTERM stops the app gracefully: each handler gets its
   grace period, each member keeps its session until its revoked resources are
   released, then leaves (dynamic members, ``--leave-on-stop``) or just stops
   (static members keep their place for a restart).  A second signal exits at
   once (status 130), nothing revoked.
2. A handler thread still running after the stop (it outlived its grace period
   and the member's close timeout) cannot be stopped and would keep the process
   alive: the daemon logs ``app.threads_abandoned`` and ends the process, which
   ends the thread.  Its member sent no LeaveGroup, so its resource moves only
   when the session expires, after the thread is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import sys
import traceback
from pathlib import Path

from workgroup.errors import ConfigError
from workgroup.log import describe_error, get_logger, user_frames
from workgroup.runtime.app import App, Settings
from workgroup.runtime.runner import AppRunner

log = get_logger(__name__)

#: Exit status after a second signal (stop at once, nothing revoked).
FORCED_EXIT = 130


def load_app(target: str) -> App:
    """Import ``module:attribute`` with the current directory on ``sys.path``."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected MODULE:APP (e.g. billing:app), got {target!r}")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(f"cannot import module {module_name!r}: {exc}") from exc
        raise _import_error(module_name, exc) from exc
    except ConfigError:
        raise  # a declaration the app got wrong: already one clear line
    except SyntaxError as exc:
        where = "".join(traceback.format_exception_only(exc)).rstrip("\n")
        raise ConfigError(f"cannot import module {module_name!r}:\n{where}") from exc
    except Exception as exc:
        raise _import_error(module_name, exc) from exc
    app = getattr(module, attribute, None)
    if app is None:
        raise ConfigError(f"module {module_name!r} has no attribute {attribute!r}")
    if not isinstance(app, App):
        raise ConfigError(f"{target} is a {type(app).__name__}, not a workgroup.App")
    return app


def _import_error(module_name: str, exc: BaseException) -> ConfigError:
    """The module raised while imported: its error and the user's frames (exit 2)."""
    frames = user_frames(exc)
    return ConfigError(
        f"cannot import module {module_name!r}: {describe_error(exc)}"
        + (f"\n{frames}" if frames else "")
    )


async def serve_until_signalled(app: App, settings: Settings) -> None:
    """Run ``app``; the first SIGINT/SIGTERM stops it gracefully, a second at once."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("app.forced_exit", signal=signal.Signals(signum).name)
            os._exit(FORCED_EXIT)
        log.info("app.signal", signal=signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    runner = AppRunner(app, settings)
    try:
        await runner.run(stop)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        threads = [r for group in runner.groups for r in group.running_threads()]
        if threads:  # rule 2
            log.error(
                "app.threads_abandoned",
                app=app.name,
                count=len(threads),
                first=[f"{kind}/{key}" for kind, key in threads[:3]],
                why="handler threads outlived their grace period; ending the process ends them",
            )
            _flush_and_exit(0 if sys.exc_info()[0] is None else 1)


def _flush_and_exit(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def run_app(app: App, settings: Settings) -> None:
    """Run ``app`` in this process until a signal (blocking)."""
    asyncio.run(serve_until_signalled(app, settings))


__all__ = ["FORCED_EXIT", "load_app", "run_app", "serve_until_signalled"]
