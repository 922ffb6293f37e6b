"""The machine a benchmark ran on, printed beside its figures."""

from __future__ import annotations

import importlib
import os
import platform


def machine(*modules: str) -> dict:
    """CPU count and model, Python version, and the versions of ``modules``.

    >>> "cpus" in machine("pyarrow")
    True
    """
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    info = {"cpus": os.cpu_count(), "cpu": model or platform.processor(), "python": platform.python_version()}
    for name in modules:
        info[name] = importlib.import_module(name).__version__
    return info
