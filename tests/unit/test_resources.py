"""tests/support/resources.py: the run's lowest free disk and memory, with the test file that ran then, and a
warning line for each that ran out; one file system is counted once."""

from __future__ import annotations

from tests.support import resources


def watch_of(tmp_path, disk: list[int], memory: list[int], monkeypatch) -> resources.ResourceWatch:
    """A watch whose samples are ``disk`` and ``memory`` in turn, one test file each (file0, file1, ...)."""
    frees, availables = iter(disk), iter(memory)
    monkeypatch.setattr(resources.shutil, "disk_usage", lambda folder: type("Usage", (), {"free": frees_now[0]}))
    monkeypatch.setattr(resources, "memory_available", lambda: availables_now[0])
    watch = resources.ResourceWatch(tmp_path)
    frees_now, availables_now = [0], [0]
    for index, (free, available) in enumerate(zip(frees, availables, strict=True)):
        frees_now[0], availables_now[0] = free, available
        watch.current = f"file{index}"
        watch.sample()
    return watch


def test_the_lowest_of_each_and_when(tmp_path, monkeypatch):
    gb = resources.GB
    watch = watch_of(tmp_path, [30 * gb, 12 * gb, 20 * gb], [16 * gb, 18 * gb, 9 * gb], monkeypatch)
    assert watch.lines() == ["lowest during the run: disk free (checkout) 12.0 GB during file1; memory available 9.0 GB during file2"]


def test_a_disk_that_ran_out_is_named_with_its_remedy(tmp_path, monkeypatch):
    gb = resources.GB
    watch = watch_of(tmp_path, [30 * gb, 287 * 1024**2, 20 * gb], [16 * gb] * 3, monkeypatch)
    lines = watch.lines()
    assert lines[0].startswith("lowest during the run: disk free (checkout) 0.3 GB during file1;")
    assert lines[1:] == [
        "warning: disk free (checkout) fell to 287 MB during file1: tests that write files fail then: "
        "free disk space (scripts/disk-check.sh says how much a run needs)"
    ]


def test_the_memory_that_ran_out_is_named(tmp_path, monkeypatch):
    gb = resources.GB
    lines = watch_of(tmp_path, [30 * gb], [100 * 1024**2], monkeypatch).lines()
    assert lines[1:] == [
        "warning: memory available fell to 100 MB during file0: processes fail or are killed then: stop other work on this machine"
    ]


def test_the_real_machine_is_read(tmp_path):
    watch = resources.ResourceWatch(tmp_path, period=0.01)
    watch.start()
    watch.stop()
    assert watch.disks["checkout"].free is not None and watch.disks["checkout"].free > 0
    assert watch.lines()[0].startswith("lowest during the run: disk free (checkout) ")
