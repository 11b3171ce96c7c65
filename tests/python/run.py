#!/usr/bin/env python3
"""CTest entry of the Python tests (pytest over this folder): exits 77, which CTest reports as
skipped, with the reason when a prerequisite is absent (the default model; Ray for -m ray);
otherwise pytest's exit status."""

import importlib.util
import sys
from pathlib import Path

import pytest

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
from conftest import model_path  # noqa: E402

args = sys.argv[1:]
if not model_path():
    print("skipped: the default model is absent (run tools/get-model)")
    sys.exit(77)
if "ray" in args and "not ray" not in args and importlib.util.find_spec("ray") is None:
    print("skipped: Ray is not installed (tools/setup installs ray[data] into the venv)")
    sys.exit(77)
sys.exit(pytest.main(["-v", "-rs", str(here), *args]))
