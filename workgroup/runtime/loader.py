"""Importing an app by ``MODULE:APP`` (``workgroup run``), with one clear error
line for each way that goes wrong (exit 2)."""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path

from workgroup.errors import ConfigError
from workgroup.log import describe_error, user_frames
from workgroup.runtime.app import App


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


__all__ = ["load_app"]
