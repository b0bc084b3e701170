"""Spark needs a Java runtime: say so in one line, before a JVM fails to start."""

from __future__ import annotations

import os
import shutil
import subprocess

from workgroup.errors import ConfigError

INSTALL_HINT = (
    "install a Java 17 or 21 runtime (Debian/Ubuntu: `apt install openjdk-17-jre-headless`; "
    "macOS: `brew install openjdk@17`) or set JAVA_HOME"
)


class JavaMissingError(ConfigError):
    """No usable ``java``: Spark cannot start."""


def java_executable() -> str | None:
    """The ``java`` Spark will run: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def check_java() -> str:
    """Return the ``java`` to use, or raise :class:`JavaMissingError` with what to install."""
    java = java_executable()
    if java is None:
        where = "JAVA_HOME has no bin/java" if os.environ.get("JAVA_HOME") else "no java on PATH"
        raise JavaMissingError(f"Spark needs Java ({where}): {INSTALL_HINT}")
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise JavaMissingError(
            f"Spark needs Java ({java} does not run: {exc}): {INSTALL_HINT}"
        ) from exc
    return java
