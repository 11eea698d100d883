"""Sharding on 8 CPU devices and across 2 processes.

The rest of the suite runs on one device, and the device count is fixed when jax starts, so the
checks run in subprocesses: tests/sharding_checks.py (once, with
--xla_force_host_platform_device_count=8; one test per check below) and two
tests/distributed_worker.py processes joined by jax.distributed on localhost.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

import jax_fp8gemm as fg

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = re.findall(r"^@check\ndef (\w+)\(", open(os.path.join(HERE, "sharding_checks.py")).read(),
                    re.M)


def _env(device_count: int | None) -> dict:
    """The child imports the same jax_fp8gemm as this process (installed or source tree)."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(fg.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAX_PLATFORMS"] = "cpu"
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
    if device_count is not None:
        flags += f" --xla_force_host_platform_device_count={device_count}"
    env["XLA_FLAGS"] = flags.strip()
    return env


@pytest.fixture(scope="module")
def check_results():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "sharding_checks.py")],
                          env=_env(8), capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    try:
        results = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        pytest.fail(f"sharding_checks.py crashed (rc={proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    print("\n".join(lines[:-1]))  # timings and the seed
    return results


@pytest.mark.parametrize("name", CHECKS)
def test_sharded_on_8_devices(check_results, name):
    """Each check: sharded results and gradients equal the unsharded ones, and the compiled HLO
    has only the collectives the layout needs (no all-gather of a large operand)."""
    assert name in check_results, f"{name} did not run"
    assert check_results[name] == "ok", check_results[name]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_NO_CPU_COLLECTIVES = re.compile(r"gloo.*(not (available|supported|built)|unimplemented)|"
                                 r"make_gloo_tcp_collectives|cpu collectives.*not",
                                 re.I)


def test_two_processes(tmp_path):
    """2 processes on localhost (jax.distributed, gloo CPU collectives, 2 devices each): sharded
    GEMM and the expert-parallel MoE across them equal the single-device results."""
    port, seed = _free_port(), int.from_bytes(os.urandom(4), "little")
    worker = os.path.join(HERE, "distributed_worker.py")
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    procs, timed_out = [], False
    try:
        for i, log in enumerate(logs):
            with open(log, "w") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, worker, str(i), "2", str(port), str(seed)], env=_env(None),
                    stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 300
        while any(p.poll() is None for p in procs):
            failed = any(p.poll() not in (None, 0) for p in procs)  # the other would wait
            if failed or time.monotonic() > deadline:
                time.sleep(2 if failed else 0)
                break
            time.sleep(0.2)
        timed_out = time.monotonic() > deadline
    finally:
        for p in procs:  # only the processes started here
            if p.poll() is None:
                p.kill()
                p.wait()
    outputs = [log.read_text() for log in logs]
    text = "\n".join(f"--- process {i} (rc={p.returncode}):\n{out[-4000:]}"
                     for i, (p, out) in enumerate(zip(procs, outputs)))
    assert not timed_out, f"the 2-process run did not finish in 300 s\n{text}"
    if any(p.returncode for p in procs) and _NO_CPU_COLLECTIVES.search(text):
        pytest.skip(f"CPU collectives (gloo) unavailable in this jaxlib:\n{text[-1500:]}")
    assert all(p.returncode == 0 for p in procs), text
    assert all("RESULT ok" in out for out in outputs), text
