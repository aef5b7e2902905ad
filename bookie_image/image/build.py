"""Building the image without a registry (DESIGN §4): nothing is pulled, ever.

Three steps, each cached under a key made of exactly what it is built from, so that an
unchanged input costs a hash and a lookup:

1. rootfs: `debootstrap --variant=minbase` with PACKAGES, from the Debian mirror the host's
   own apt configuration names (read at run time, never stored), into
   `<cache>/rootfs-<base key>`;
2. base image: that rootfs streamed as a tar into `docker import` → `bkchaos-base:<base key>`;
3. project image: a Dockerfile FROM the base installs the project from a wheelhouse built on
   the host (third-party wheels cached in `<cache>/wheels-<deps key>`), so `docker build`
   itself needs no network → `bkchaos:<sources key>`.

This module runs on the host and takes the docker client from its caller; it never imports
the harness (the image is the product under test).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import docker
import docker.errors

SUITE = "bookworm"
PACKAGES = (
    "python3",
    "python3-venv",
    "openjdk-17-jre-headless",
    "zookeeper",
    "iproute2",
    "iptables",
    "libfaketime",
    "procps",
    "openssh-server",
    "ca-certificates",
)
BASE_REPO = "bkchaos-base"
IMAGE_REPO = "bkchaos"
#: What goes into the project wheel (mirrors pyproject's packages.find) plus the files
#: setuptools reads; the sources key is a hash of exactly these.
PROJECT_PACKAGES = ("bookie_image", "core", "harness", "nemesis", "workloads", "checkers")
PROJECT_FILES = ("pyproject.toml", "README.md")
IMAGE_PYTHON = (3, 11)  # Debian bookworm's python3: the wheelhouse must match it

#: Image settings applied at `docker import`, so the Dockerfile needs no metadata steps
#: (each Dockerfile step costs seconds on fuse-overlayfs).
IMPORT_CHANGES = (
    "ENV PATH=/opt/bkchaos/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV PYTHONUNBUFFERED=1",
    'ENTRYPOINT ["python", "-m", "bookie_image.image.supervisor", "run"]',
)
SITE_PACKAGES = "/opt/bkchaos/lib/python3.11/site-packages"
#: Dependencies are installed by pip in a cached layer; the project wheel (pure Python)
#: is unpacked on the host and copied in one step, the only one that reruns on an edit.
VENV_INSTALL = (
    "python3 -m venv /opt/bkchaos"
    " && /opt/bkchaos/bin/pip install --quiet --disable-pip-version-check --no-index"
    " --find-links {deps} -r {deps}/requirements.txt"
)
"""Shell that installs the dependencies from a wheelhouse at `{deps}` into the project's
venv: the image's Dockerfile runs it, and so does the ssh runtime on each host."""
DOCKERFILE = f"""\
FROM {{base}}
COPY deps /tmp/deps
RUN {VENV_INSTALL.format(deps="/tmp/deps")} \\
 && rm -rf /tmp/deps \\
 && mkdir -p /run/sshd /var/log/bkchaos /var/lib/bkchaos
COPY project {SITE_PACKAGES}/
"""
NODE_DEPENDENCIES = ("kazoo", "crc32c")
"""The third-party packages a node imports (bookie, agent, supervisor, nemesis.nodeops):
all that the ssh runtime installs on a host besides the project itself."""


class ImageBuildError(Exception):
    """A build that cannot proceed; the message says what to do (the CLI exits 254)."""


class Progress(Protocol):
    """Where the build reports which step runs (the CLI renders it with rich)."""

    def start(self, step: str) -> None: ...

    def detail(self, line: str) -> None: ...

    def done(self, step: str, seconds: float, cached: bool) -> None: ...


class QuietProgress:
    """A Progress that shows nothing (tests, fixtures)."""

    def start(self, step: str) -> None:
        pass

    def detail(self, line: str) -> None:
        pass

    def done(self, step: str, seconds: float, cached: bool) -> None:
        pass


@dataclass
class BuildResult:
    tag: str
    base_tag: str
    seconds: dict[str, float] = field(default_factory=dict)
    cached: list[str] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def cache_dir() -> Path:
    """`$BKCHAOS_CACHE`, else `~/.cache/bkchaos`: rootfs, wheelhouse and build contexts."""
    configured = os.environ.get("BKCHAOS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "bkchaos"


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:12]


def rootfs_key() -> str:
    return _digest(SUITE, *sorted(PACKAGES))


def base_key() -> str:
    return _digest(rootfs_key(), *IMPORT_CHANGES)


# ---- the host's Debian mirror ------------------------------------------------------------


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    """Stanzas of a deb822 `.sources` file as lower-cased field -> value."""
    fields: dict[str, str] = {}
    key = ""
    for line in [*text.splitlines(), ""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, ""
        elif line[0] in " \t" and key:
            fields[key] += " " + line.strip()
        else:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            fields[key] = value.strip()


def _one_line_entries(text: str) -> Iterator[dict[str, str]]:
    """Entries of a one-line `sources.list` (`deb [options] URI SUITE COMPONENTS…`)."""
    for raw in text.splitlines():
        words = re.sub(r"\[[^\]]*\]", " ", raw.split("#", 1)[0]).split()
        if len(words) >= 3:
            yield {"types": words[0], "uris": words[1], "suites": words[2]}


def host_mirror(suite: str = SUITE, apt_dir: Path = Path("/etc/apt")) -> str:
    """The first `deb` mirror in the host's apt configuration that serves `suite`."""
    sources = apt_dir / "sources.list.d"
    files = [apt_dir / "sources.list", *sorted(sources.glob("*.list"))]
    entries = [e for f in files if f.is_file() for e in _one_line_entries(f.read_text())]
    for path in sorted(sources.glob("*.sources")):
        stanzas = _deb822_stanzas(path.read_text())
        entries += [s for s in stanzas if s.get("enabled", "yes").lower() != "no"]
    for entry in entries:
        if "deb" in entry.get("types", "").split() and suite in entry.get("suites", "").split():
            return entry.get("uris", "").split()[0].rstrip("/")
    raise ImageBuildError(
        f"no Debian {suite} mirror in the host's apt configuration ({apt_dir}/sources.list "
        f"or {sources}/*.sources); add a `deb` entry for {suite} there and run again"
    )


# ---- running tools -----------------------------------------------------------------------


def _run_logged(cmd: list[str], log: Path, progress: Progress, hint: str) -> None:
    """Run `cmd`, streaming each output line to `progress` and to `log`; raise on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            out.write(line)
            progress.detail(line.rstrip())
        code = proc.wait()
    if code != 0:
        lines = log.read_text(errors="replace").splitlines()[-15:]
        raise ImageBuildError(
            f"{Path(cmd[0]).name} failed with exit code {code}; {hint}. "
            f"Full log: {log}\n" + "\n".join(lines)
        )


def _mounts_under(path: Path) -> list[str]:
    root = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    return [p for p in points if p == root or p.startswith(root + "/")]


def _remove_tree(path: Path) -> None:
    """Remove a (possibly half-built) tree, unmounting first: a debootstrap that died may
    leave /proc or a bind-mounted /dev inside, and rmtree must never recurse into those."""
    for point in sorted(_mounts_under(path), reverse=True) if path.exists() else []:
        subprocess.run(["umount", "-l", point], check=False)
    if path.exists() and _mounts_under(path):
        raise ImageBuildError(f"cannot unmount everything under {path}; unmount it by hand")
    shutil.rmtree(path, ignore_errors=True)


# ---- step 1 and 2: the base image --------------------------------------------------------


def _debootstrap(target: Path, progress: Progress) -> None:
    exe = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if exe is None:
        raise ImageBuildError(
            "debootstrap is not installed; run `make setup` or `apt-get install -y debootstrap`"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root: run `bkchaos image build` as root")
    mirror = host_mirror()
    partial = target.with_name(target.name + ".partial")
    _remove_tree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    progress.detail(f"debootstrap {SUITE} from {mirror}")
    cmd = [exe, "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(partial), mirror]
    hint = f"check that {mirror} is reachable (it comes from the host's apt sources)"
    _run_logged(cmd, target.with_name(target.name + ".log"), progress, hint)
    # Nothing inside needs apt's lists or downloaded .debs; they only bloat the import.
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (partial / junk).glob("*"):
            if item.is_file():
                item.unlink()
    partial.rename(target)


def _docker_import(client: docker.DockerClient, rootfs: Path, tag: str) -> None:
    """Stream `tar` of the rootfs straight into the engine: no tarball on disk."""
    repository, _, version = tag.partition(":")
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tar.stdout is not None
    try:
        reply = client.api.import_image(
            src=tar.stdout,
            repository=repository,
            tag=version,
            changes=list(IMPORT_CHANGES),
            stream_src=True,
        )
    finally:
        tar.stdout.close()
        _, err = tar.communicate()
    if tar.returncode != 0 or "errorDetail" in str(reply):
        raise ImageBuildError(
            f"docker import of {rootfs} failed (tar exit {tar.returncode}): "
            f"{err.decode(errors='replace').strip()} {reply}"
        )


def _image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


# ---- step 3: the project image ---------------------------------------------------------


def project_root() -> Path:
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise ImageBuildError(
            f"the image is built from a bkchaos source checkout, and {root} is not one; "
            "run `bkchaos image build` from an editable install (`pip install -e .`)"
        )
    return root


def _requirements(root: Path) -> tuple[list[str], list[str]]:
    """(runtime dependencies, build-system requirements) as pyproject.toml names them."""
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    return list(meta["project"].get("dependencies", [])), list(meta["build-system"]["requires"])


def _deps_key(root: Path) -> str:
    deps, build = _requirements(root)
    return _digest(platform.machine(), *map(str, IMAGE_PYTHON), *deps, "|", *build)


def source_files(root: Path) -> list[Path]:
    """Every file the project wheel is built from, relative to `root`, in a stable order."""
    files = [Path(name) for name in PROJECT_FILES if (root / name).is_file()]
    for package in PROJECT_PACKAGES:
        files += sorted(
            p.relative_to(root)
            for p in (root / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
    return files


def _sources_parts(root: Path) -> list[str | bytes]:
    parts: list[str | bytes] = []
    for rel in source_files(root):
        parts += [str(rel), (root / rel).read_bytes()]
    return parts


def image_tag(root: Path | None = None) -> str:
    """The tag the current source tree builds to (what the runtimes start)."""
    root = root or project_root()
    return f"{IMAGE_REPO}:{_digest(base_key(), _deps_key(root), DOCKERFILE, *_sources_parts(root))}"


def _deps_wheelhouse(root: Path, progress: Progress) -> Path:
    """Wheels of every third-party requirement (cached: the only step that reaches PyPI)."""
    if sys.version_info[:2] != IMAGE_PYTHON:
        wanted = ".".join(map(str, IMAGE_PYTHON))
        raise ImageBuildError(
            f"the image runs Debian {SUITE}'s python {wanted}, so the wheelhouse must be built "
            f"by python {wanted}; this is {platform.python_version()}: use a {wanted} venv"
        )
    dest = cache_dir() / f"wheels-{_deps_key(root)}"
    if dest.is_dir():
        return dest
    deps, build = _requirements(root)
    partial = dest.with_name(dest.name + ".partial")
    _remove_tree(partial)
    cmd = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-w", str(partial)]
    hint = "pip could not fetch the project's dependencies; is PyPI reachable?"
    _run_logged([*cmd, *build, *deps], dest.with_name(dest.name + ".log"), progress, hint)
    (partial / "requirements.txt").write_text("\n".join(deps) + "\n")
    partial.rename(dest)
    return dest


def _project_files(root: Path, wheelhouse: Path, out: Path, progress: Progress) -> None:
    """Build the project wheel offline and unpack it into `out` (site-packages layout).

    The wheel is built from a copy of exactly the hashed source files, so setuptools'
    in-tree build/ leftovers can never leak into the image. It is pure Python, so
    unpacking it is its installation (no console scripts are needed in the image)."""
    work = out.parent / "wheel-build"
    for rel in source_files(root):
        (work / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, work / "src" / rel)
    cmd = [
        *(sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps"),
        *("--no-index", "--find-links", str(wheelhouse), "-w", str(work), str(work / "src")),
    ]
    _run_logged(cmd, work / "wheel.log", progress, "the project wheel did not build")
    (wheel,) = work.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(out)
    shutil.rmtree(work)


def _node_requirements(root: Path) -> list[str]:
    """The project's own requirement specs of NODE_DEPENDENCIES (e.g. `kazoo>=2.10`)."""
    deps, _ = _requirements(root)
    return [d for d in deps if re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] in NODE_DEPENDENCIES]


def node_bundle(root: Path | None = None, progress: Progress | None = None) -> tuple[Path, str]:
    """What the ssh runtime installs on a host, built offline and cached by content:
    `<cache>/node-<key>/deps` (wheels of NODE_DEPENDENCIES and their requirements.txt)
    and `project/` (the project wheel, unpacked). Returns (that directory, key)."""
    progress = progress or QuietProgress()
    root = root or project_root()
    key = _digest(_deps_key(root), *NODE_DEPENDENCIES, *_sources_parts(root))
    dest = cache_dir() / f"node-{key}"
    if dest.is_dir():
        return dest, key
    wheelhouse = _deps_wheelhouse(root, progress)
    cache_dir().mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{dest.name}.partial-", dir=cache_dir()))
    (partial / "deps").mkdir()
    requirements = _node_requirements(root)
    cmd = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-index"]
    cmd += ["--find-links", str(wheelhouse), "-w", str(partial / "deps"), *requirements]
    _run_logged(cmd, partial / "deps.log", progress, "the node's wheels did not resolve offline")
    (partial / "deps" / "requirements.txt").write_text("\n".join(requirements) + "\n")
    _project_files(root, wheelhouse, partial / "project", progress)
    try:
        partial.rename(dest)
    except OSError:  # another build of the same key got there first: same content
        shutil.rmtree(partial)
    return dest, key


def _docker_build(client: docker.DockerClient, context: Path, tag: str, progress: Progress) -> None:
    for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True):
        if "error" in chunk:
            raise ImageBuildError(f"docker build of {tag} failed: {chunk['error'].strip()}")
        if line := str(chunk.get("stream", "")).strip():
            progress.detail(line)


# ---- the whole build ---------------------------------------------------------------------


def build_image(
    client: docker.DockerClient, progress: Progress | None = None, root: Path | None = None
) -> BuildResult:
    """Build (or reuse) the base and project images of the source tree at `root` (this
    checkout by default; a snapshot keeps concurrent edits out); returns the tag to run."""
    progress = progress or QuietProgress()
    root = root or project_root()
    key = base_key()
    result = BuildResult(tag=image_tag(root), base_tag=f"{BASE_REPO}:{key}")
    rootfs = cache_dir() / f"rootfs-{rootfs_key()}"

    def step(name: str, cached: bool, action: Callable[[], None] | None = None) -> None:
        progress.start(name)
        began = time.monotonic()
        if not cached and action is not None:
            action()
        result.seconds[name] = time.monotonic() - began
        if cached:
            result.cached.append(name)
        progress.done(name, result.seconds[name], cached)

    have_image = _image_exists(client, result.tag)
    have_base = have_image or _image_exists(client, result.base_tag)
    step("debootstrap rootfs", have_base or rootfs.is_dir(), lambda: _debootstrap(rootfs, progress))
    step(
        "docker import base",
        have_base,
        lambda: _docker_import(client, rootfs, result.base_tag),
    )
    if have_image:
        step("project image", True)
        return result

    def project_image() -> None:
        wheelhouse = _deps_wheelhouse(root, progress)
        cache_dir().mkdir(parents=True, exist_ok=True)
        context = Path(tempfile.mkdtemp(prefix="context-", dir=cache_dir()))
        try:
            shutil.copytree(wheelhouse, context / "deps", copy_function=os.link)
            _project_files(root, wheelhouse, context / "project", progress)
            (context / "Dockerfile").write_text(DOCKERFILE.format(base=result.base_tag))
            _docker_build(client, context, result.tag, progress)
        finally:
            shutil.rmtree(context, ignore_errors=True)

    step("project image", False, project_image)
    return result
