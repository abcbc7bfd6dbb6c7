"""image/clampimage.py's disk check, before a byte is saved, on this machine's real folders:
``docker save`` copies the whole image under the engine's root while the layers above the base
are written again under the build's folder; one disk holds their sum; short of it, one line
(``DiskSpaceError``, its exit code) naming the folder, the sizes and what to do."""

from __future__ import annotations

import shutil

import pytest

from edgevllm.common.errors import DiskSpaceError
from edgevllm.image.clampimage import check_clamp_places


def free(path) -> int:
    return shutil.disk_usage(path).free


@pytest.fixture
def places(tmp_path):
    """An engine root and a build folder on this machine's one disk."""
    (tmp_path / "root").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path / "root", tmp_path / "out"


def test_an_image_that_fits_passes(places):
    check_clamp_places("img:1", 1 << 20, 1 << 19, *places)


def test_short_of_the_image_and_its_upper_layers_is_one_line(places):
    """Each alone would fit, their sum on one disk does not: the check adds them."""
    half = free(places[0]) // 2 + (1 << 30)
    check_clamp_places("img:1", half, half, *places)  # docker save's copy alone: fits
    with pytest.raises(DiskSpaceError) as found:
        check_clamp_places("img:1", half, 0, *places)
    line = str(found.value)
    assert "\n" not in line and "img:1" in line and str(places[0]) in line
    assert "docker save's copy" in line and "build without --reproducible" in line
    assert found.value.exit_code == DiskSpaceError("x").exit_code != 0


def test_an_image_past_the_disk_is_refused_whatever_its_base(places):
    with pytest.raises(DiskSpaceError, match="only"):
        check_clamp_places("img:1", free(places[0]) + (1 << 30), 1 << 40, *places)


def test_a_root_this_user_cannot_reach_is_not_counted(places, tmp_path):
    """The engine's root is the daemon's: unreadable here, only the build's folder counts."""
    size = free(tmp_path) // 2 + (1 << 30)
    check_clamp_places("img:1", 2 * size, size, tmp_path / "missing", places[1])
    with pytest.raises(DiskSpaceError):
        check_clamp_places("img:1", 2 * size, size, places[0], places[1])
