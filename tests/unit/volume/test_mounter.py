from __future__ import annotations

from nodeagent.volume.mounter import MountInfo, mount_at, mounts_under, parse_mountinfo

SAMPLE = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:31 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s rw,relatime shared:20 - tmpfs tmpfs rw,size=1024k
37 22 8:1 /data/x /var/lib/kubelet/pods/u1/volume-subpaths/v/c/0 rw - ext4 /dev/sda1 rw
38 22 0:32 / /mnt/with\\040space rw - tmpfs tmp\\011fs rw
39 36 0:33 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s rw - tmpfs tmpfs rw
bad line
"""


def test_parse() -> None:
    mounts = parse_mountinfo(SAMPLE)
    assert [m.mount_point for m in mounts] == [
        "/",
        "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s",
        "/var/lib/kubelet/pods/u1/volume-subpaths/v/c/0",
        "/mnt/with space",
        "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s",
    ]
    assert mounts[1] == MountInfo("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s", "tmpfs", "tmpfs", "/")
    assert mounts[2].root == "/data/x"
    assert mounts[3].source == "tmp\tfs"


def test_mount_at_and_under() -> None:
    mounts = parse_mountinfo(SAMPLE)
    assert mount_at(mounts, "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s/") is mounts[4]
    assert mount_at(mounts, "/var/lib/kubelet/pods/u1") is None
    under = [m.mount_point for m in mounts_under(mounts, "/var/lib/kubelet/pods/u1")]
    # Deepest first; of two stacked at one point, the later first.
    assert under[0].endswith("volume-subpaths/v/c/0")
    assert under[1:] == ["/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret/s"] * 2
    assert mounts_under(mounts, "/var/lib/kubelet/pods/u") == []
