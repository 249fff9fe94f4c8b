"""Disk classes for `bench/compare/run.py --disk-class` (docs/benchmarks.md, "Disk classes").

A disk class is a read bandwidth (GB/s) emulated with a cgroup-v1 blkio throttle
(`blkio.throttle.read_bps_device`) on the block device holding the data. Classes at or below
`--ram-disk-above` run on the real disk holding --data; faster ones run there too when that disk read at
least DISK_MARGIN x the class unthrottled in the row's probe (choose_device), and otherwise on a
RAM-backed loop device (an ext4 image in /dev/shm) holding a copy of the files one row needs, throttled
the same way: the VM's own disk reads only ~1.6-2.3 GB/s with a cold host cache
(shared/docs/benchmark-anchors.md), and the loop device's copies take a core of the guest's.

The pure parts (parse_classes, bound, choose_device, check_privileges) are tested by tests/bench/disk_class_test.py.
"""
import json
import os
import shutil
import subprocess
import sys
import time

BLKIO = "/sys/fs/cgroup/blkio"


class DiskClassError(RuntimeError):
    """A disk-class run cannot start (not root, no blkio controller, not enough RAM, a tool missing)."""


def parse_classes(spec):
    """'1.5,3.5,7' -> [1.5, 3.5, 7.0] (GB/s, in the order given)."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise DiskClassError(f"--disk-class {spec!r}: empty entry (expected GB/s values, e.g. 1.5,3.5,7)")
        try:
            v = float(part)
        except ValueError:
            raise DiskClassError(f"--disk-class {spec!r}: {part!r} is not a number of GB/s") from None
        if not (0.01 <= v <= 1000):
            raise DiskClassError(f"--disk-class {spec!r}: {part} GB/s is outside 0.01-1000")
        if v in out:
            raise DiskClassError(f"--disk-class {spec!r}: {part} given twice")
        out.append(v)
    return out


def bound(bytes_per_token, throughput_bps, resident_tok_s):
    """The decode bound of issue 12: the slower of the disk (bytes read per token at the throttled
    device's measured throughput) and the compute (resident decode speed). Returns seconds per
    token of each, the bound in tok/s, the target (90% of it) and which side limits."""
    if throughput_bps <= 0 or resident_tok_s <= 0 or bytes_per_token < 0:
        raise ValueError(f"bound: throughput {throughput_bps}, resident {resident_tok_s} tok/s, "
                         f"{bytes_per_token} bytes/token: each must be positive")
    disk_s = bytes_per_token / throughput_bps
    compute_s = 1.0 / resident_tok_s
    b = 1.0 / max(disk_s, compute_s)
    return {"disk_s_per_token": disk_s, "compute_s_per_token": compute_s, "bound_tok_s": b,
            "target_tok_s": 0.9 * b, "limited_by": "disk" if disk_s >= compute_s else "compute"}


# A class above --ram-disk-above still runs on the disk holding the data when that disk, unthrottled, read
# at least this many times the class in the row's own probe (the host's cache answering): there the reads
# arrive by the hypervisor's copy, as a real drive's arrive by DMA, while a loop device's copies take one of
# the guest's cores (0.5-0.65 of a core at 7 GB/s: docs/benchmarks.md, "Disk classes").
DISK_MARGIN = 1.2


def choose_device(cls, ram_disk_above, disk_unthrottled_gbps, prefer_disk=True, margin=DISK_MARGIN):
    """Where a class runs: ("disk", why) or ("ram", why). Classes up to ram_disk_above run on the disk; faster
    ones on the disk only when prefer_disk and its unthrottled probe (None: not measured) read >= margin x cls."""
    if cls <= ram_disk_above:
        return "disk", f"{cls:g} GB/s is at most --ram-disk-above ({ram_disk_above:g})"
    if not prefer_disk:
        return "ram", f"{cls:g} GB/s is above --ram-disk-above ({ram_disk_above:g}); --no-prefer-disk"
    if disk_unthrottled_gbps is None:
        return "ram", f"{cls:g} GB/s is above --ram-disk-above ({ram_disk_above:g}); the disk was not probed"
    if disk_unthrottled_gbps >= margin * cls:
        return "disk", (f"the disk read {disk_unthrottled_gbps:.2f} GB/s unthrottled, at least {margin:g} x "
                        f"{cls:g}")
    return "ram", (f"the disk read {disk_unthrottled_gbps:.2f} GB/s unthrottled, under {margin:g} x {cls:g}: "
                   f"a RAM-backed loop device")


def fraction_of_bound(tok_s, bnd):
    return tok_s / bnd["bound_tok_s"]


def check_privileges(euid=None, blkio=BLKIO, need_loop=False):
    """Refuses clearly when the run cannot throttle a disk."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise DiskClassError("--disk-class needs root: it creates cgroup-v1 blkio and memory children"
                             + (", a loop device and a mount" if need_loop else "") + f" (effective uid {euid})")
    if not os.path.exists(os.path.join(blkio, "blkio.throttle.read_bps_device")):
        raise DiskClassError(f"--disk-class needs the cgroup-v1 blkio controller with throttling: "
                             f"{blkio}/blkio.throttle.read_bps_device does not exist")
    if need_loop:
        for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
            if shutil.which(tool) is None:
                raise DiskClassError(f"--disk-class: a RAM-backed class needs `{tool}` (util-linux / e2fsprogs)")


def whole_disk(majmin):
    """MAJ:MIN of the whole disk a partition (or disk) MAJ:MIN belongs to (throttles apply per disk)."""
    sysdir = os.path.realpath(f"/sys/dev/block/{majmin}")
    if os.path.exists(os.path.join(sysdir, "partition")):
        with open(os.path.join(os.path.dirname(sysdir), "dev")) as f:
            return f.read().strip()
    return majmin


def device_of(path):
    st = os.stat(path)
    return whole_disk(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")


def tree_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if os.path.isfile(os.path.join(path, f)))


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def enter_cgroups_argv(procs_files, argv):
    """argv run by a shell that first moves itself into each cgroup (its `cgroup.procs` files), then execs."""
    moves = " && ".join(f'echo $$ > "{p}"' for p in procs_files)
    return ["sh", "-c", f'{moves} && exec "$@"', "sh"] + argv


def remove_cgroup(path):
    """rmdir a cgroup child, retrying while its last processes exit."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.2)
    print(f"warning: could not remove {path}", file=sys.stderr, flush=True)


class BlkioCgroup:
    """A cgroup-v1 blkio child with a read_bps throttle on each of `devices` (MAJ:MIN)."""

    def __init__(self, devices, bps, tag):
        self.path = os.path.join(BLKIO, f"strata-bench-{os.getpid()}-{tag}")
        os.mkdir(self.path)
        self.procs = os.path.join(self.path, "cgroup.procs")
        self.devices = list(devices)
        try:
            for d in self.devices:
                with open(os.path.join(self.path, "blkio.throttle.read_bps_device"), "w") as f:
                    f.write(f"{d} {int(bps)}")
        except OSError:
            self.close()
            raise

    def read_bytes(self):
        """Bytes this cgroup read from its throttled devices so far."""
        total = 0
        with open(os.path.join(self.path, "blkio.throttle.io_service_bytes_recursive")) as f:
            for line in f:
                p = line.split()
                if len(p) == 3 and p[0] in self.devices and p[1] == "Read":
                    total += int(p[2])
        return total

    def close(self):
        remove_cgroup(self.path)


class RamDisk:
    """An ext4 image in /dev/shm on a loop device, mounted, holding copies of `paths` (files or flat
    directories). Always close() it (umount, losetup -d, image removed)."""

    def __init__(self, paths, tag, log):
        need = sum(tree_bytes(p) for p in paths)
        size = int(need * 1.06) + (256 << 20)
        self.image = f"/dev/shm/strata-bench-{os.getpid()}-{tag}.img"
        self.mnt = f"/tmp/strata-bench-{os.getpid()}-{tag}"
        self.loop = None
        self.mounted = False
        self.log = log
        try:
            with open(self.image, "wb") as f:
                f.truncate(size)
            self.loop = subprocess.run(["losetup", "-f", "--show", self.image], check=True, capture_output=True,
                                       text=True).stdout.strip()
            subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E",
                            "lazy_itable_init=0,lazy_journal_init=0", self.loop], check=True, capture_output=True)
            os.makedirs(self.mnt, exist_ok=True)
            subprocess.run(["mount", self.loop, self.mnt], check=True, capture_output=True)
            self.mounted = True
            with open(f"/sys/block/{os.path.basename(self.loop)}/dev") as f:
                self.dev = f.read().strip()
            t0 = time.time()
            self.copies = {}
            for p in paths:
                dst = os.path.join(self.mnt, os.path.basename(p.rstrip("/")))
                if os.path.isdir(p):
                    shutil.copytree(p, dst)
                else:
                    shutil.copyfile(p, dst)
                self.copies[p] = dst
            log(f"[disk] {self.loop} ({self.dev}, {size / 1e9:.2f} GB image in /dev/shm): copied "
                f"{need / 1e9:.2f} GB in {time.time() - t0:.0f} s")
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.mounted:
            subprocess.run(["umount", self.mnt], check=False)
            self.mounted = False
        if os.path.isdir(self.mnt):
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], check=False)
            self.loop = None
        if os.path.exists(self.image):
            os.remove(self.image)


def expert_blob_bytes(container):
    with open(os.path.join(container, "manifest.json")) as f:
        return json.load(f)["experts"][0]["blob_bytes"]


def probe_argv(io_bench, file, expert_bytes, depth, chunk_bytes, target_bytes=3e9, rounds=3):
    """strata_io_bench reading random expert-sized O_DIRECT reads of `file` in `chunk_bytes` chunks with
    `depth` in flight: as many experts per run as give ~target_bytes (the throttle admits short bursts, so
    a run must last well over its 0.1 s slices)."""
    slots = os.path.getsize(file) // expert_bytes
    n = int(max(1, min(slots, -(-target_bytes // expert_bytes))))
    return [io_bench, file, "--expert-mib", f"{expert_bytes / 2**20:.6f}", "--chunk-mib", f"{chunk_bytes / 2**20:.6f}",
            "--experts", str(n), "--rounds", str(rounds), "--configs", f"uring:{depth}"]


def parse_probe(out):
    """The median GB/s and the per-round figures of strata_io_bench's output."""
    rounds = [float(l.split("GB/s")[0].split()[-1]) for l in out.splitlines() if l.startswith("round ")]
    med = [l for l in out.splitlines() if l.startswith("median GB/s:")]
    if not med or not rounds:
        raise RuntimeError(f"strata_io_bench: unexpected output:\n{out[-2000:]}")
    return float(med[0].split()[-1]), rounds
