"""PostgreSQL for FerretDB's PostgreSQL backend (``--store-backend postgresql`` /
``SESSION_CORE_STORE_BACKEND=postgresql``): the server binaries of the machine (Debian's
``postgresql`` package: /usr/lib/postgresql/<v>/bin; or ``$SESSION_CORE_PG_BIN``), a cluster
made by ``initdb`` under ``<state>/postgres/data`` with a ``ferretdb`` database, run in the
foreground as a stack component on a loopback port (TCP only, no Unix socket). PostgreSQL refuses
to run as root: as root it runs as ``$SESSION_CORE_PG_USER`` (default ``postgres``) through
``setpriv``, which execs, so the stack still signals the postmaster itself."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from .base import StackError, free_port, listening, log, port_free
from .processes import State

BACKENDS = ("sqlite", "postgresql")
DATABASE = "ferretdb"
ROLE = "ferretdb"
# Durable by default, as the SQLite backend (synchronous=FULL): a commit's WAL is flushed before
# PostgreSQL answers. "off" (opt-in, for speed) answers before the flush: an operating-system
# crash can lose the last ~0.6 s (3 x wal_writer_delay) of acknowledged commits.
# docs/local-stack.md
SYNC_ENV = "SESSION_CORE_PG_SYNCHRONOUS_COMMIT"
SYNC_DEFAULT = "on"


def store_backend(value: str | None = None) -> str:
    b = (value or os.environ.get("SESSION_CORE_STORE_BACKEND") or "sqlite").strip().lower()
    if b == "postgres":
        b = "postgresql"
    if b not in BACKENDS:
        raise StackError(f"store backend {b!r}: expected one of {', '.join(BACKENDS)}")
    return b


def pg_bin(name: str) -> Path:
    """A PostgreSQL server program: from $SESSION_CORE_PG_BIN when it is set (there only),
    else the newest /usr/lib/postgresql/<v>/bin, else PATH."""
    env = os.environ.get("SESSION_CORE_PG_BIN")
    if env:
        if (Path(env) / name).exists():
            return Path(env) / name
        raise StackError(f"PostgreSQL's '{name}' not found in SESSION_CORE_PG_BIN={env}")
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
                      reverse=True)
    for d in versions:
        if (d / name).exists():
            return d / name
    found = shutil.which(name)
    if found:
        return Path(found)
    raise StackError(f"PostgreSQL's '{name}' not found (apt-get install postgresql, or set "
                     "SESSION_CORE_PG_BIN to the directory holding initdb and postgres)")


def available() -> bool:
    try:
        pg_bin("initdb")
        pg_bin("postgres")
    except StackError:
        return False
    return True


def _run_as() -> tuple[list[str], int | None, int | None]:
    """The command prefix, uid and gid the server runs with: as root, another user."""
    if os.geteuid() != 0:
        return [], None, None
    user = os.environ.get("SESSION_CORE_PG_USER", "postgres")
    try:
        pw = pwd.getpwnam(user)
    except KeyError as exc:
        raise StackError(f"PostgreSQL will not run as root and there is no user {user!r} "
                         "(set SESSION_CORE_PG_USER to an unprivileged user)") from exc
    setpriv = shutil.which("setpriv")
    if not setpriv:
        raise StackError("running as root: 'setpriv' (util-linux) is needed to start "
                         "PostgreSQL as an unprivileged user")
    return ([setpriv, f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"],
            pw.pw_uid, pw.pw_gid)


def _others_can_enter(path: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


def cluster_dir(st: State) -> Path:
    """``<state>/postgres``; as root, where the server's user can reach it: the state dir is
    opened to traversal (o+x, not listing) when only it is in the way, else (a state dir under
    /root, say) the cluster lives under the temporary directory and ``<state>/postgres`` links
    to it."""
    home = st.root / "postgres"
    if os.geteuid() != 0 or home.is_symlink() or home.exists():
        return home.resolve() if home.is_symlink() else home
    st.root.mkdir(parents=True, exist_ok=True)
    if _others_can_enter(st.root.parent):
        mode = os.stat(st.root).st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(st.root, stat.S_IMODE(mode) | stat.S_IXOTH)
        return home
    key = hashlib.sha256(str(st.root).encode()).hexdigest()[:12]
    away = Path(tempfile.gettempdir()) / f"session-core-pg-{key}"
    away.mkdir(parents=True, exist_ok=True)
    home.symlink_to(away)
    log(f"postgres: {st.root} is not reachable by the server's user; cluster in {away}")
    return away


def prepare(st: State) -> tuple[list[str], int]:
    """initdb (once) and the ``ferretdb`` database; returns the server command and its port
    (kept across restarts in stack.json)."""
    prefix, uid, gid = _run_as()
    home = cluster_dir(st)
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    if uid is not None and gid is not None:
        os.chown(home, uid, gid)
    if not (data / "PG_VERSION").exists():
        shutil.rmtree(data, ignore_errors=True)
        cmd = [*prefix, str(pg_bin("initdb")), "-D", str(data), "-U", ROLE, "--auth=trust",
               "-E", "UTF8", "--locale=C.UTF-8", "--no-instructions"]
        _run(cmd, "postgres: initdb")
        # the database FerretDB uses, made in single-user mode: no server to wait for
        single = [*prefix, str(pg_bin("postgres")), "--single", "-D", str(data), "postgres"]
        _run(single, f"postgres: CREATE DATABASE {DATABASE}",
             stdin=f"CREATE DATABASE {DATABASE};\n")
    stored = st.data.get("postgres_port")
    port = stored if isinstance(stored, int) and port_free(stored) else free_port()
    st.data["postgres_port"] = port
    st.save()
    sync = os.environ.get(SYNC_ENV) or SYNC_DEFAULT
    cmd = [*prefix, str(pg_bin("postgres")), "-D", str(data), "-p", str(port),
           "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
           "-c", f"synchronous_commit={sync}", "-c", "log_min_messages=warning",
           "-c", "log_checkpoints=off"]
    return cmd, port


def _run(cmd: list[str], what: str, stdin: str | None = None) -> None:
    log(f"{what}: {' '.join(cmd)}")
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False,
                          cwd="/")
    if proc.returncode != 0:
        raise StackError(f"{what} failed (exit {proc.returncode}):\n"
                         f"{(proc.stdout + proc.stderr)[-4000:]}")


def url(port: int) -> str:
    return f"postgres://{ROLE}@127.0.0.1:{port}/{DATABASE}"


def ready(port: int) -> bool:
    """Accepting connections (pg_isready when installed, else the port listens)."""
    if not listening(port):
        return False
    try:
        isready = pg_bin("pg_isready")
    except StackError:
        return True
    return subprocess.run([str(isready), "-q", "-h", "127.0.0.1", "-p", str(port), "-d",
                           DATABASE, "-U", ROLE], check=False, capture_output=True,
                          timeout=10).returncode == 0
