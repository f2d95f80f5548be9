"""Builds the compiled core: mypyc turns the modules ``processors/native.py`` lists into C extensions.

``pip install .`` compiles them (a C compiler and Python's headers are needed); with
``EDGELEDGER_COMPILE=0`` the package installs as pure Python, which runs the same code more slowly.
Everything else about the package is in ``pyproject.toml``.
"""

import os
import runpy

from setuptools import setup


def core_extensions() -> list:
    if os.environ.get("EDGELEDGER_COMPILE", "1") == "0":
        return []
    from mypyc.build import mypycify

    # Read as a plain file: importing the package here would import its dependencies.
    compiled = runpy.run_path(os.path.join("processors", "native.py"))["COMPILED"]
    return mypycify(list(compiled), group_name="processors.edgeledger_core", opt_level="3")


setup(ext_modules=core_extensions())
