"""A sweep's template workspace is copied for every run: only regular files, folders
and symlinks (kept as links) can be (issue 25, item 11). A device node, a FIFO or a
socket in it is refused by name before any run starts: ``/dev/zero``'s twin would be
copied until the disk is full, a FIFO would block the copy for ever."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

import harnessnb as hn


def _device(path: Path) -> None:
    try:  # /dev/null's numbers: harmless even to a copy that reads it
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


@pytest.mark.parametrize(
    "make", [_device, os.mkfifo, _socket], ids=["char-device", "fifo", "socket"]
)
def test_a_special_file_in_the_template_is_refused_by_name_before_any_run(
    make: Callable[[Path], None], tmp_path: Path
) -> None:
    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "README.md").write_text("# x\n")
    special = template / "sub" / "odd"
    make(special)
    with hn.Store(":memory:") as store:
        with pytest.raises(hn.ConfigError) as caught:
            hn.sweep_sync(["say hi"], [hn.ScriptedProvider(["hi"])], workspace=template,
                          store=store)  # fmt: skip
        assert store.runs().empty  # nothing ran
    assert str(special) in caught.value.message
    assert "not a regular file, folder or symlink" in caught.value.message


def test_regular_files_folders_and_symlinks_are_copied_as_they_are(tmp_path: Path) -> None:
    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "sub" / "data.txt").write_text("data\n")
    (template / "link").symlink_to("sub/data.txt")
    (template / "dirlink").symlink_to("sub")
    with hn.Store(":memory:") as store:
        result = hn.sweep_sync(["say hi"], [hn.ScriptedProvider(["hi"])], workspace=template,
                               store=store, keep_workspaces=True)  # fmt: skip
        copy = Path(store.runs()["workspace"].iloc[0])
    assert result.runs["outcome"].tolist() == ["finished"]
    assert (copy / "sub" / "data.txt").read_text() == "data\n"
    assert os.readlink(copy / "link") == "sub/data.txt"
    assert os.readlink(copy / "dirlink") == "sub"
