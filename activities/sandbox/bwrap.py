"""The bubblewrap command line of a sandboxed process, and the check that it can be created.

The sandbox sees: a read-only view of /usr, the Python installation, the virtual environment
and the project's packages (nothing else of the host: no /etc/shadow, no home directories, no
Replaybook database); a private size-limited tmpfs at /tmp, the only writable place; fresh
pid, ipc, uts and network namespaces (only ``lo``, so nothing on the host's loopback is
reachable); an empty environment; no new user namespace (a seccomp filter, ``seccomp``). rlimits (CPU seconds, address space, file size, process
count) are set by ``prlimit`` (util-linux), which execs bwrap with them, so everything inside
inherits them. No Python runs between fork and exec (no ``preexec_fn``): a forked child of a
threaded worker that ran Python there could deadlock on a lock another thread held at the
fork, before exec, and the event loop that waits for the exec with it (the worker hung).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from activities.sandbox.seccomp import userns_filter_fd
from models.errors import SandboxUnavailableError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_ETC_FILES = ("ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "hosts")
ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


def read_only_paths() -> list[Path]:
    """What the sandbox may read: system libraries, Python, the venv, our packages."""
    paths = [Path("/usr")]
    for prefix in (sys.base_prefix, sys.prefix):
        resolved = Path(prefix).resolve()
        if not any(resolved.is_relative_to(p) for p in paths):
            paths.append(resolved)
    for child in sorted(PROJECT_ROOT.iterdir()):
        if (child / "__init__.py").is_file():
            paths.append(child)
    return paths


def _parents_with_perms(path: Path, made: set[Path]) -> list[str]:
    """``--dir`` for each missing ancestor, world-traversable: bwrap would otherwise copy the
    host's mode (``/root`` is 0700) and the unprivileged sandbox user could not reach it."""
    args: list[str] = []
    for parent in reversed(path.parents):
        if parent == Path("/") or parent in made:
            continue
        made.add(parent)
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def bwrap_command(
    settings: SandboxSettings,
    argv: Sequence[str],
    uid: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The bwrap command line; ``seccomp_fd`` (``seccomp.userns_filter_fd``, passed to the
    child) loads the filter that refuses new user namespaces."""
    bwrap = shutil.which(settings.bwrap) or settings.bwrap
    args = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    for name, value in ENVIRONMENT.items():
        args += ["--setenv", name, value]
    # world-writable and sticky like a host /tmp: the unprivileged sandbox user writes there.
    # Mounted first, so that a project or venv that lives under /tmp (a CI checkout) is bound
    # read-only on top of it instead of being hidden by it.
    args += ["--perms", "1777", "--size", str(settings.tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/tmp")}
    for link in ("bin", "lib", "lib64", "sbin"):
        host = Path("/") / link
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    for path in read_only_paths():
        args += _parents_with_perms(path, made)
        args += ["--ro-bind", str(path), str(path)]
    args += _parents_with_perms(Path("/etc/x"), made)
    for name in _ETC_FILES:
        if (Path("/etc") / name).is_file():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--chdir", "/tmp"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    command = list(argv)
    if os.geteuid() == 0:
        # bwrap runs privileged (no user namespace) and drops every capability but these two;
        # setpriv then becomes the unprivileged uid with an empty bounding set
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        run_as = settings.uid if uid is None else uid
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        command = [
            setpriv,
            f"--reuid={run_as}",
            f"--regid={run_as}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            *command,
        ]
    return [*args, "--", *command]


def limited(settings: SandboxSettings, command: Sequence[str]) -> list[str]:
    """``command`` run under the sandbox's rlimits: ``prlimit`` sets them on itself and execs
    ``command`` (same pid), so bwrap and everything in it inherit them."""
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    cpu, memory, size = settings.cpu_seconds, settings.address_space_bytes, settings.file_size_bytes
    return [
        prlimit,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={memory}:{memory}",
        f"--fsize={size}:{size}",
        f"--nproc={settings.max_processes}:{settings.max_processes}",
        "--core=0:0",
        "--",
        *command,
    ]


def python_argv(module: str, *extra: str) -> list[str]:
    """The venv's interpreter (its path in the resolved venv directory, which the sandbox
    binds; not the resolved binary: the path is how it finds the venv — a worktree may link
    its ``.venv`` to another checkout's), running ``module`` as ``-m`` would; ``-I`` ignores PYTHON* variables and the user
    site. The project's packages are imported from ``PROJECT_ROOT``, the ones the sandbox
    binds (``read_only_paths``): an editable install's finder may point at another checkout
    (a git worktree's), which the sandbox does not show."""
    boot = (
        f"import sys, runpy; sys.path.insert(0, {str(PROJECT_ROOT)!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [str(Path(sys.prefix).resolve() / "bin" / "python"), "-I", "-c", boot, *extra]


def check_available(settings: SandboxSettings) -> None:
    """Create a sandbox and run ``true`` in it; ``SandboxUnavailableError`` naming the reason
    when that fails (the replay worker then refuses to run steps)."""
    bwrap = shutil.which(settings.bwrap)
    if bwrap is None:
        raise SandboxUnavailableError(
            f"bubblewrap ({settings.bwrap!r}) is not installed: run "
            "infra/ensure-debian-tools.sh bwrap=bubblewrap, or start the worker with REPLAYBOOK_SANDBOX=off (development only)"
        )
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise SandboxUnavailableError("setpriv (util-linux) is needed to drop root in the sandbox")
    if shutil.which("prlimit") is None:
        raise SandboxUnavailableError("prlimit (util-linux) is needed to limit the sandbox")
    try:
        with userns_filter_fd() as fd:
            done = subprocess.run(
                limited(settings, bwrap_command(settings, ["/bin/true"], seccomp_fd=fd)),
                capture_output=True,
                timeout=30,
                pass_fds=(fd,),
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailableError(f"cannot start bubblewrap: {exc}") from exc
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"bubblewrap cannot create the sandbox (exit {done.returncode}): "
            f"{done.stderr.decode(errors='replace').strip()[-500:]}"
        )


async def spawn(
    settings: SandboxSettings, argv: Sequence[str], uid: int | None = None
) -> asyncio.subprocess.Process:
    """Start ``argv`` in a new sandbox with pipes on stdin, stdout and stderr."""
    try:
        # the child keeps its own copy of the filter's descriptor; ours is closed after
        with userns_filter_fd() as fd:
            # no preexec_fn: the fork (a vfork) runs no Python before exec (module docstring)
            return await asyncio.create_subprocess_exec(
                *limited(settings, bwrap_command(settings, argv, uid, seccomp_fd=fd)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={},
                start_new_session=True,
                pass_fds=(fd,),
            )
    except OSError as exc:
        raise SandboxUnavailableError(f"cannot start bubblewrap: {exc}") from exc
