"""Fixtures of the Python tests: the default model, the CLI binary of the same build, and a
runner of `offgen generate` whose records the API's outputs are compared with."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def model_path() -> str:
    """$OFFGEN_MODEL, else the tools/get-model cache (as tests/model_path.h)."""
    env = os.environ.get("OFFGEN_MODEL")
    if env and Path(env).exists():
        return env
    cache = os.environ.get("OFFGEN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "offgen")
    p = Path(cache) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return str(p) if p.exists() else ""


@pytest.fixture(scope="session")
def model() -> str:
    m = model_path()
    if not m:
        pytest.skip("the default model is absent (run tools/get-model)")
    return m


@pytest.fixture(scope="session")
def offgen_bin() -> str:
    b = os.environ.get("OFFGEN_BIN") or str(ROOT / "build" / "offgen")
    if not Path(b).exists():
        pytest.skip(f"the offgen binary is absent ({b}): build it first")
    return b


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def run_cli(offgen_bin, model, tmp_path):
    """run_cli(rows, *flags) -> {id: record} of `offgen generate` over `rows` (one per line)."""

    def run(rows, *flags):
        inp = write_jsonl(tmp_path / "in.jsonl", rows)
        out = tmp_path / "out.jsonl"
        cmd = [offgen_bin, "generate", "--model", model, "--input", str(inp), "--output", str(out),
               "--overwrite", "-q", *map(str, flags)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode in (0, 3), f"{cmd} failed ({p.returncode}): {p.stderr}"
        records = [json.loads(line) for line in out.read_text().splitlines()]
        return {r["id"]: r for r in records}

    return run
