#!/bin/sh
# Runs inside the box's rootfs (chroot, at host speed) while `nodeagent vm box` builds it. $1 is the payload
# directory: debs/, wheels/, images/*.tar, crictl, vagrant.pub. Everything slow happens here, never in the VM.
set -eu
payload=$1

# The vagrant user, as every Vagrant box has it: password "vagrant", Vagrant's insecure key, sudo without password.
id vagrant >/dev/null 2>&1 || useradd --create-home --shell /bin/bash vagrant
echo 'vagrant:vagrant' | chpasswd
install -d -m 700 -o vagrant -g vagrant /home/vagrant/.ssh
install -m 600 -o vagrant -g vagrant "$payload/vagrant.pub" /home/vagrant/.ssh/authorized_keys
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >/etc/sudoers.d/vagrant
chmod 440 /etc/sudoers.d/vagrant
# No reverse DNS lookups: the VM's network is isolated, and each lookup would stall an ssh login.
echo 'UseDNS no' >/etc/ssh/sshd_config.d/nodeagent.conf

echo nodeagent-vm >/etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 nodeagent-vm\n' >/etc/hosts
echo 'LABEL=rootfs / ext4 defaults,errors=remount-ro 0 1' >/etc/fstab
cat >/etc/network/interfaces <<'IFACES'
auto lo
iface lo inet loopback

auto eth0
iface eth0 inet dhcp
IFACES

# nodeagent's dependencies in a venv of their own; provisioning adds the nodeagent wheel to it (--no-index).
python3 -m venv /opt/nodeagent
/opt/nodeagent/bin/pip install --quiet --no-index --find-links "$payload/wheels" --upgrade pip
/opt/nodeagent/bin/pip install --quiet --no-index --find-links "$payload/wheels" "$payload"/wheels/*.whl
install -d /opt/nodeagent/wheels
cp "$payload"/wheels/*.whl /opt/nodeagent/wheels/

# The images containerd imports at first start (no registry in the VM), and crictl when the host had one built.
install -d /var/lib/nodeagent-vm/images
cp "$payload"/images/*.tar /var/lib/nodeagent-vm/images/
if [ -f "$payload/crictl" ]; then install -m 755 "$payload/crictl" /usr/local/bin/crictl; fi

# containerd starts with the config provisioning writes, not with the package's default.
systemctl disable containerd.service >/dev/null 2>&1 || true
apt-get clean
rm -rf /var/lib/apt/lists/*
