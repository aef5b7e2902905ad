"""ZooKeeper (Debian's `zookeeper` package) as a local process on a loopback port.

BookKeeper keeps its metadata in ZooKeeper, and so do we: no in-memory stand-in is used by
anything a user runs. This module finds Java and the ZooKeeper jar, writes a standalone
`zoo.cfg` into the node's own data dir, starts `QuorumPeerMain` detached (so a
`bkchaos cluster up` can return while it keeps running) and waits for `ruok` → `imok`.
"""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError
from harness.runtime.process import free_port, stop_pid, tail

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SERVER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
"""What zkServer.sh runs: an ensemble member when zoo.cfg lists `server.N`, else standalone
(ZooKeeperServerMain ignores `server.N` and would start three unrelated servers)."""
START_TIMEOUT_S = 60.0
SERVER_LOG = "zookeeper.log"
"""ZooKeeper's own log (log4j, rolled), next to the JVM's output in the node's log dir."""
SERVER_LOG_MAX_BYTES = 32 << 20
"""The most ZooKeeper's log may take: a current file and one rolled file of half this."""
LOG_BINDING = ("/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")
"""Debian's ZooKeeper logs through slf4j, with no binding on its jar's class path (it
then logs nothing at all); these (libslf4j-java, liblog4j1.2-java: dependencies of
libzookeeper-java) route it to log4j, configured by `log4j_properties`."""


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise UserError(
            "Java was not found on PATH; ZooKeeper needs Java 17. "
            "Install it with: apt-get install -y openjdk-17-jre-headless"
        )
    return java


def find_zookeeper_jar() -> Path:
    if not ZOOKEEPER_JAR.is_file():
        raise UserError(
            f"ZooKeeper was not found ({ZOOKEEPER_JAR} is missing). Install Debian's "
            "package with: apt-get install -y zookeeper   (or run `make setup`)"
        )
    return ZOOKEEPER_JAR


def four_letter_word(host: str, port: int, word: str = "ruok", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command; returns the reply or "" if unreachable."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def is_serving(host: str, port: int) -> bool:
    """True once ZooKeeper accepts sessions: `ruok` says imok earlier than that, `srvr`
    reports "not currently serving requests" until the server is really up."""
    return "Mode:" in four_letter_word(host, port, "srvr")


QUORUM_PORT, ELECTION_PORT = 2888, 3888


def zoo_cfg(data_dir: Path | str, port: int, host: str, ensemble: list[str] | None = None) -> str:
    """A server's zoo.cfg (short ticks so sessions of killed nodes expire fast): standalone,
    or one member of `ensemble` (every member's address, in `server.N` order; each member
    needs `myid` in its data dir — see `myid_command`)."""
    members = "".join(
        f"server.{n}={address}:{QUORUM_PORT}:{ELECTION_PORT}\n"
        for n, address in enumerate(ensemble or [], 1)
    )
    return (
        "tickTime=500\n"
        "initLimit=10\nsyncLimit=5\n"
        f"dataDir={data_dir}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={host}\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,mntr\n"
        f"{members}"
    )


def myid_command(command: list[str], data_dir: str, myid: int) -> list[str]:
    """`command` preceded by writing the ensemble member's `myid` into its data dir; the
    shell execs the server, so the supervisor's pid is ZooKeeper's."""
    quoted = " ".join(shlex.quote(word) for word in command)
    script = f"mkdir -p {shlex.quote(data_dir)} && echo {myid} > {shlex.quote(data_dir)}/myid"
    return ["sh", "-c", f"{script} && exec {quoted}"]


def server_command(
    java: str, jar: Path | str, config: Path | str, log_config: Path | str
) -> list[str]:
    """The ZooKeeper server command line, shared by every runtime; it logs as
    `log_config` (`log4j_properties`) says."""
    classpath = ":".join([str(jar), *LOG_BINDING])
    log4j = f"-Dlog4j.configuration=file:{log_config}"
    return [java, "-Xmx256m", "-XX:+UseSerialGC", log4j, "-cp", classpath, SERVER_MAIN, str(config)]


def log4j_properties(log_file: Path | str, max_bytes: int = SERVER_LOG_MAX_BYTES) -> str:
    """ZooKeeper's log at INFO into `log_file`, rolled at half of `max_bytes` with one
    rolled file kept: a node log, like the bookies' and agents', never outgrows its cap."""
    return (
        "log4j.rootLogger=INFO, FILE\n"
        "log4j.appender.FILE=org.apache.log4j.RollingFileAppender\n"
        f"log4j.appender.FILE.File={log_file}\n"
        f"log4j.appender.FILE.MaxFileSize={max(1, max_bytes // 2)}\n"
        "log4j.appender.FILE.MaxBackupIndex=1\n"
        "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] %m%n\n"
    )


@dataclass
class LocalZooKeeper:
    """One standalone ZooKeeper server whose files all live under `data_dir`."""

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    pid: int | None = None
    env: dict[str, str] | None = None
    """The server's environment (None: the controller's); the local runtime adds the run's
    ownership marks (harness.runtime.ownership)."""
    max_log_bytes: int = SERVER_LOG_MAX_BYTES

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """ZooKeeper's own log (`log4j_properties`)."""
        return self.data_dir / SERVER_LOG

    @property
    def output_path(self) -> Path:
        """The JVM's output: what it says before ZooKeeper logs, or when it dies."""
        return self.data_dir / "zk.log"

    def start(self) -> LocalZooKeeper:
        java = find_java()
        jar = find_zookeeper_jar()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port(self.host)
        config = self.data_dir / "zoo.cfg"
        config.write_text(zoo_cfg(self.data_dir / "data", self.port, self.host))
        log_config = self.data_dir / "log4j.properties"
        log_config.write_text(log4j_properties(self.log_path, self.max_log_bytes))
        with self.output_path.open("ab") as log:
            proc = subprocess.Popen(
                server_command(java, jar, config, log_config),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
            )
        self.pid = proc.pid
        self._wait_ready(proc)
        return self

    def _wait_ready(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UserError(
                    f"ZooKeeper exited with code {proc.returncode} while starting; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            if self.is_serving():
                return
            time.sleep(0.1)
        self.stop()
        raise UserError(
            f"ZooKeeper did not answer ruok on {self.connect_string} within "
            f"{START_TIMEOUT_S:.0f}s; last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self) -> str:
        return f"{tail(self.output_path)}\n{tail(self.log_path)}".strip()

    def is_serving(self) -> bool:
        return is_serving(self.host, self.port)

    def stop(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid)
            self.pid = None
