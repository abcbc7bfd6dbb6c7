"""tests/support/cacheuse.py: the run's ledger of keyed test bases, and which of the cache's
images and tarballs the sweep after a whole passing CI run would remove (the docker listing is
given here, so no image of this machine is touched)."""

from __future__ import annotations

from support.cacheuse import record, stale_images, stale_tarballs, sweep, tarball_used, used_tags

USED = {"edgevllm-test/debian-python:trixie-amd64-73fa6e9b23",
        "edgevllm-test/sshd-node:bookworm-9ad87c7616",
        "edgevllm-test/cuda:13.0-amd64-858b2496f7"}


def test_record_appends_only_where_a_ledger_is_named(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger"
    monkeypatch.delenv("EDGEVLLM_TEST_LEDGER", raising=False)
    record("edgevllm-test/cuda:13.0-amd64-1")
    assert not ledger.exists()
    monkeypatch.setenv("EDGEVLLM_TEST_LEDGER", str(ledger))
    record("edgevllm-test/cuda:13.0-amd64-1")
    record("edgevllm-test/cuda:13.0-amd64-1")
    record("edgevllm-test/ray:2.60.0-2")
    assert used_tags(ledger) == {"edgevllm-test/cuda:13.0-amd64-1", "edgevllm-test/ray:2.60.0-2"}


def test_only_keyed_bases_no_test_asked_for_are_stale():
    listed = sorted(USED) + ["edgevllm-test/debian-python:trixie-amd64-0000000000",
                             "edgevllm-test/cuda-ccache:13.0-amd64-1111111111",
                             "edgevllm-test/e2e-spark:0.1.0-spark-88b0fc9a3af6",
                             "edgevllm-test-publish-small:e6d18cbd0a",
                             "debian:trixie", "myorg/cuda:13.0-amd64-0000000000"]
    assert stale_images(listed, USED) == ["edgevllm-test/debian-python:trixie-amd64-0000000000",
                                          "edgevllm-test/cuda-ccache:13.0-amd64-1111111111"]


def test_a_tarball_belongs_to_the_image_whose_tag_it_repeats(tmp_path):
    assert tarball_used("rootfs-trixie-amd64-73fa6e9b23.tar", USED)
    assert tarball_used("rootfs-sshd-bookworm-9ad87c7616.tar", USED)
    assert not tarball_used("rootfs-trixie-amd64-adb47a06ba.tar", USED)
    assert tarball_used("notes.txt", USED)   # not a keyed tarball: never touched
    for name in ("rootfs-trixie-amd64-73fa6e9b23.tar", "rootfs-trixie-amd64-adb47a06ba.tar",
                 "rootfs-sshd-bookworm-0000000000.tar", "other.tar"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in stale_tarballs(tmp_path, USED)] == [
        "rootfs-sshd-bookworm-0000000000.tar", "rootfs-trixie-amd64-adb47a06ba.tar"]


def test_an_empty_ledger_sweeps_nothing(tmp_path):
    (tmp_path / "rootfs-trixie-amd64-adb47a06ba.tar").write_bytes(b"x")
    ledger = tmp_path / "ledger"
    ledger.write_text("")
    assert sweep(ledger, tmp_path) == []
    assert (tmp_path / "rootfs-trixie-amd64-adb47a06ba.tar").exists()
