"""Where the image build finds the host's Debian mirror: deb822 and one-line sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie_image.image.build import ImageBuildError, _deb822_stanzas, host_mirror


def test_mirror_is_read_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "# comment\nTypes: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb deb-src\nURIs: http://mirror.example/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert host_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "deb [signed-by=/k.gpg] http://one.example/debian bookworm main # note\n"
    )
    assert host_mirror("bookworm", tmp_path) == "http://one.example/debian"
    with pytest.raises(ImageBuildError, match="no Debian trixie mirror"):
        host_mirror("trixie", tmp_path)
    assert list(_deb822_stanzas("A: 1\n b\n\n")) == [{"a": "1 b"}]
    (tmp_path / "sources.list.d").rmdir()  # a host with only the classic file
    assert host_mirror("bookworm", tmp_path) == "http://one.example/debian"
