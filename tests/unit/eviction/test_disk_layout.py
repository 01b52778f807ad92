"""The disk layout from device numbers (upstream: the imagefs's device against the root's, then containerfs)."""

from __future__ import annotations

import pytest

from eviction.disks import DiskLayout, layout_from_devices


@pytest.mark.parametrize(
    ("root", "image", "container", "layout"),
    [
        (1, 1, None, DiskLayout()),  # one filesystem (this machine)
        (1, 1, 1, DiskLayout()),
        (1, 2, None, DiskLayout(dedicated_image_fs=True)),  # images and writable layers on their own disk
        (1, 2, 2, DiskLayout(dedicated_image_fs=True)),
        (1, 2, 1, DiskLayout(dedicated_image_fs=True, split_container_image_fs=True)),  # layers back on nodefs
        (None, 2, None, DiskLayout()),  # unknown: as one disk
        (1, None, None, DiskLayout()),
    ],
)
def test_layout_from_devices(root: int | None, image: int | None, container: int | None, layout: DiskLayout) -> None:
    assert layout_from_devices(root, image, container) == layout
