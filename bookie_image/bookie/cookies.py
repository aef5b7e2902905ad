"""Cookies: proof that a bookie's disks are the disks it had before.

One JSON cookie lives in every data dir (``<dir>/current/cookie.json``) and one in
ZooKeeper (``<root>/cookies/<bookie_id>``). They share an instance id and the dir layout.
Why: a bookie that comes back with a wiped or swapped disk would answer "no such entry"
for entries it once acknowledged, and recovery would then truncate ledgers (reference,
"Bringing back a dead bookie"). So the bookie refuses to start unless its cookies agree.

Rules (`reconcile`):
- no cookie anywhere: a new bookie; write them all;
- ZooKeeper has none but every dir has the same valid cookie: the operator deleted the
  ZooKeeper cookie; restore it from the dirs (the data is intact);
- ZooKeeper has one: every dir must hold an equal cookie, else refuse. A missing dir
  cookie means a wiped disk. To re-initialise knowingly, the operator deletes the
  ZooKeeper cookie (and the dirs' contents), accepting that ledgers may be truncated.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

COOKIE_FILE = "current/cookie.json"
COOKIE_VERSION = 1


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    instance_id: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]
    version: int = COOKIE_VERSION

    @classmethod
    def new(cls, bookie_id: str, journal_dir: Path, ledger_dirs: tuple[Path, ...]) -> Cookie:
        return cls(bookie_id, uuid.uuid4().hex, str(journal_dir), tuple(map(str, ledger_dirs)))

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        """Parse a cookie; raises ValueError for anything that is not one."""
        try:
            raw = json.loads(data)
            return cls(
                str(raw["bookie_id"]),
                str(raw["instance_id"]),
                str(raw["journal_dir"]),
                tuple(str(d) for d in raw["ledger_dirs"]),
                int(raw["version"]),
            )
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a cookie: {exc}") from None


class CookieRefused(Exception):
    """The bookie must not start; `dir` is the data dir at fault (None: ZooKeeper)."""

    def __init__(self, dir: Path | None, reason: str, advice: str) -> None:
        super().__init__(f"{reason}. {advice}")
        self.dir = dir
        self.reason = reason
        self.advice = advice


DirCookie = Cookie | ValueError | None  # None: no cookie file; ValueError: unreadable


def reconcile(expected: Cookie, zk: Cookie | None, dirs: dict[Path, DirCookie]) -> str:
    """Decide what to do at start: "new", "restore-zk" or "ok"; or raise CookieRefused.

    `expected` is the cookie this config would write (its instance id is ignored when
    comparing); `zk` the ZooKeeper cookie; `dirs` what each data dir holds.
    """
    for d, found in dirs.items():
        if isinstance(found, ValueError):
            raise CookieRefused(
                d,
                f"the cookie in data dir {d} is unreadable ({found})",
                "The disk may be corrupt; do not start this bookie on it. Replace the disk "
                "and decommission the bookie, or restore the cookie file",
            )
    present = {d: c for d, c in dirs.items() if isinstance(c, Cookie)}
    if zk is None and not present:
        return "new"
    reference = zk if zk is not None else next(iter(present.values()))
    if (reference.bookie_id, reference.journal_dir, reference.ledger_dirs) != (
        expected.bookie_id,
        expected.journal_dir,
        expected.ledger_dirs,
    ):
        where = "ZooKeeper" if zk is not None else "the data dirs"
        raise CookieRefused(
            None if zk is not None else next(iter(present)),
            f"the cookie in {where} was written for bookie {reference.bookie_id!r} with "
            f"journal_dir {reference.journal_dir} and ledger_dirs {list(reference.ledger_dirs)}, "
            f"but this config says {expected.bookie_id!r}, {expected.journal_dir}, "
            f"{list(expected.ledger_dirs)}",
            "Changing a bookie's dirs makes acknowledged entries unreadable; restore the old "
            "config, or decommission the bookie and start it afresh",
        )
    for d, found in dirs.items():
        if found is None:
            raise CookieRefused(
                d,
                f"data dir {d} has no cookie but "
                + (
                    "ZooKeeper has one for this bookie"
                    if zk is not None
                    else "other data dirs of this bookie do"
                ),
                "The disk was wiped or replaced: starting would make acknowledged entries "
                "vanish and can truncate ledgers. Decommission the bookie (re-replicate its "
                "ledgers) first; to re-initialise anyway, knowingly, delete the ZooKeeper "
                "cookie and empty every data dir",
            )
        if found != reference:
            raise CookieRefused(
                d,
                f"the cookie in data dir {d} (instance {found.instance_id}) does not match "
                f"{'ZooKeeper' if zk is not None else 'the other data dirs'} "
                f"(instance {reference.instance_id})",
                "This disk belongs to another bookie or another incarnation of this one; "
                "mount the right disk",
            )
    return "ok" if zk is not None else "restore-zk"
