"""``python -m activities.sandbox.probes``: measure, from inside a sandbox, what it allows.

Reads a JSON request on stdin (a host port that is listening, host paths that must not be
visible) and prints one JSON object: every answer comes from trying, not from configuration.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_SECRET_NAMES = re.compile(
    r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL|AWS_|DATABASE_URL|REPLAYBOOK_|TEMPORAL_", re.I
)
_SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/root/.aws/credentials", "/root/.ssh/id_rsa")


def _connect(host: str, port: int) -> str | None:
    """None when a connection was made, else the error."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def network(port: int) -> dict[str, Any]:
    interfaces = sorted(name for _, name in socket.if_nameindex())
    attempts = {
        f"127.0.0.1:{port} (listening on the host)": _connect("127.0.0.1", port),
        "1.1.1.1:53": _connect("1.1.1.1", 53),
    }
    blocked = all(error is not None for error in attempts.values()) and interfaces == ["lo"]
    return {"blocked": blocked, "interfaces": interfaces, "attempts": attempts}


def environment_names() -> list[str] | None:
    """The names of the variables this process was started with, read the way any code in the
    sandbox could (``/proc/self/environ``); ``None`` when that cannot be read."""
    try:
        data = Path("/proc/self/environ").read_bytes()
    except OSError:
        return None
    return [
        entry.split(b"=", 1)[0].decode(errors="replace") for entry in data.split(b"\0") if entry
    ]


def credentials(paths: list[str]) -> dict[str, Any]:
    visible_names = environment_names()
    # an environment that cannot be inspected is not proved empty of secrets
    names = (
        ["(the environment could not be read)"]
        if visible_names is None
        else sorted(name for name in visible_names if _SECRET_NAMES.search(name))
    )
    readable = []
    for path in [*_SECRET_FILES, *paths]:
        try:
            with open(path, "rb") as handle:
                handle.read(1)
            readable.append(path)
        except IsADirectoryError:
            if os.listdir(path) is not None:
                readable.append(path)
        except OSError:
            pass
    return {"visible": bool(names or readable), "env": names, "files": readable}


def writable(paths: list[str]) -> dict[str, bool]:
    result = {}
    for path in paths:
        target = os.path.join(path, f".probe-{os.getpid()}")
        try:
            with open(target, "w") as handle:
                handle.write("x")
            os.unlink(target)
            result[path] = True
        except OSError:
            result[path] = False
    return result


def _python(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=timeout
    )


def cpu() -> dict[str, Any]:
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    # enforcement: a child lowers its own limit to 1 s and spins; the kernel must stop it
    spin = "import resource\nresource.setrlimit(resource.RLIMIT_CPU,(1,2))\nwhile True: pass"
    started = time.monotonic()
    done = _python(spin)
    killed_by = signal.Signals(-done.returncode).name if done.returncode < 0 else None
    limited = soft != resource.RLIM_INFINITY and killed_by in ("SIGXCPU", "SIGKILL")
    return {
        "limited": limited,
        "rlimit_cpu_seconds": None if soft == resource.RLIM_INFINITY else soft,
        "spinner_killed_by": killed_by,
        "spinner_seconds": round(time.monotonic() - started, 2),
    }


def memory() -> dict[str, Any]:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    done = _python("b = bytearray(10 * 1024**3)\nprint(len(b))")
    refused = done.returncode != 0 and "MemoryError" in done.stderr
    return {
        "limited": soft != resource.RLIM_INFINITY and refused,
        "rlimit_address_space_bytes": None if soft == resource.RLIM_INFINITY else soft,
        "allocating_10_gib": "refused (MemoryError)" if refused else f"exit {done.returncode}",
    }


def processes() -> dict[str, Any]:
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    cap = 4 * (soft if soft != resource.RLIM_INFINITY else 256)
    code = (
        "import os, time\nn = 0\npids = []\n"
        f"while n < {cap}:\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n"
        "    pids.append(pid)\n    n += 1\n"
        "print(n)\n"
        "for pid in pids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)\n"
    )
    done = _python(code)
    forked = int(done.stdout.strip() or -1)
    return {
        "limited": soft != resource.RLIM_INFINITY and 0 <= forked < cap,
        "rlimit_nproc": None if soft == resource.RLIM_INFINITY else soft,
        "forked_before_refusal": forked,
    }


def file_size() -> dict[str, Any]:
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return {"limited": False, "rlimit_file_size_bytes": None}
    path = f"/tmp/.probe-big-{os.getpid()}"
    try:
        with open(path, "wb") as handle:
            handle.write(b"\0" * (soft + 1))
        refused = False
    except OSError:
        refused = True
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return {"limited": refused, "rlimit_file_size_bytes": soft}


def main() -> None:
    request = json.loads(sys.stdin.read() or "{}")
    net = network(int(request.get("listening_port", 9)))
    creds = credentials(list(request.get("secret_paths", [])))
    read_only = writable(["/", "/usr", *request.get("read_only_paths", [])])
    tmp = writable(["/tmp"])
    report = {
        "network_blocked": net["blocked"],
        "credentials_visible": creds["visible"],
        "root_read_only": not any(read_only.values()),
        "tmp_writable": tmp["/tmp"],
        "cpu_limited": (c := cpu())["limited"],
        "memory_limited": (m := memory())["limited"],
        "processes_limited": (p := processes())["limited"],
        "file_size_limited": (f := file_size())["limited"],
        "details": {
            "uid": os.getuid(),
            "network": net,
            "credentials": creds,
            "writable": {**read_only, **tmp},
            "cpu": c,
            "memory": m,
            "processes": p,
            "file_size": f,
        },
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
