#!/usr/bin/env python3
"""Installs a fully pinned lock file into a virtual environment with the least disk at its peak.

Why: vLLM's and SGLang's locks each pull a CUDA build of torch and a dozen NVIDIA wheels (the
registry's torch imports without a GPU only when they are present): 6.3 and 7.4 GB installed.
One `pip install -r LOCK` holds every downloaded wheel (3.0 and 3.2 GB) beside what it has
installed until it ends, and the two venvs hold the same hundred packages twice. On a CI machine
whose free disk is small that is the difference between a run and `No space left on device`.

So:
- every `name==version` of the lock that the `--share-from` venv already holds, with all its
  files inside site-packages, is hard-linked from there (no download, no second copy; pip then
  finds it installed and leaves it alone);
- the rest is installed with `pip install --no-deps --no-cache-dir` in batches (the big wheels,
  torch, triton and the NVIDIA libraries, one at a time), each batch's downloads in a temporary
  directory inside the venv that is removed when the batch ends.

Usage: install_lock.py VENV LOCK [--share-from OTHER_VENV]
Prints what it linked, the batches and the disk used.
"""

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# Wheels of several hundred MB: installed alone, so at most one of them is on disk twice.
BIG_PREFIXES = ("torch", "triton", "nvidia-", "cuda-", "opencv", "xgrammar", "llvmlite", "scipy")
BATCH = 25


def canon(name):
    return name.lower().replace("_", "-").replace(".", "-")


def read_lock(lock):
    pins = []
    for n, raw in enumerate(Path(lock).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "==" not in line:
            sys.exit(f"{lock}:{n}: not a `name==version` pin: {raw!r}")
        name, version = line.split("==", 1)
        pins.append((name.strip(), version.strip()))
    return pins


def site_packages(venv):
    out = subprocess.run(
        [str(Path(venv) / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


def installed(site):
    """canonical name -> (version, dist-info dir) for every distribution in site-packages."""
    found = {}
    for d in site.glob("*.dist-info"):
        meta = d / "METADATA"
        if not meta.is_file():
            continue
        name = version = None
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Name: "):
                name = line[6:].strip()
            elif line.startswith("Version: "):
                version = line[9:].strip()
            elif not line:
                break
        if name and version:
            found[canon(name)] = (version, d)
    return found


def record_files(dist_info):
    """Paths (relative to site-packages) a distribution installed, or None when any lies
    outside site-packages (console scripts in bin/ name their venv's python: not shareable)."""
    rec = dist_info / "RECORD"
    if not rec.is_file():
        return None
    files = []
    for line in rec.read_text().splitlines():
        path = line.rsplit(",", 2)[0].strip('"')
        if not path:
            continue
        if path.startswith("..") or os.path.isabs(path):
            return None
        files.append(path)
    return files


def link_shared(pins, src_site, dst_site):
    have = installed(src_site)
    mine = installed(dst_site)
    linked, nbytes = [], 0
    for name, version in pins:
        c = canon(name)
        if c in mine or c not in have or have[c][0] != version:
            continue
        files = record_files(have[c][1])
        if files is None or not all((src_site / f).exists() for f in files):
            continue
        for f in files:
            s, d = src_site / f, dst_site / f
            d.parent.mkdir(parents=True, exist_ok=True)
            if d.exists():
                continue
            os.link(s, d)
            nbytes += s.stat().st_size
        linked.append(f"{name}=={version}")
    return linked, nbytes


def batches(pins):
    big = [p for p in pins if canon(p[0]).startswith(BIG_PREFIXES)]
    small = [p for p in pins if p not in big]
    for p in big:
        yield [p]
    for i in range(0, len(small), BATCH):
        yield small[i : i + BATCH]


def disk_free(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("venv")
    ap.add_argument("lock")
    ap.add_argument("--share-from", help="a venv whose identical packages are hard-linked, not downloaded")
    a = ap.parse_args()
    venv = Path(a.venv).resolve()
    pins = read_lock(a.lock)
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = site_packages(venv)
    print(f"  {a.lock}: {len(pins)} pins; {disk_free(venv):.1f} GB free before", flush=True)

    if a.share_from and (Path(a.share_from) / "bin" / "python").exists():
        src = site_packages(Path(a.share_from).resolve())
        if os.stat(src).st_dev == os.stat(site).st_dev:
            linked, nbytes = link_shared(pins, src, site)
            print(f"  hard-linked {len(linked)} packages ({nbytes / 1e9:.2f} GB) from {a.share_from}", flush=True)

    mine = installed(site)
    todo = [p for p in pins if canon(p[0]) not in mine or mine[canon(p[0])][0] != p[1]]
    tmp = venv / ".pip-tmp"
    env = dict(os.environ, TMPDIR=str(tmp), PIP_DISABLE_PIP_VERSION_CHECK="1")
    for group in batches(todo):
        tmp.mkdir(exist_ok=True)
        reqs = [f"{n}=={v}" for n, v in group]
        r = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", "--no-cache-dir", "--no-deps", *reqs], env=env
        )
        shutil.rmtree(tmp, ignore_errors=True)
        if r.returncode != 0:
            sys.exit(f"install_lock.py: pip failed installing {' '.join(reqs)} from {a.lock} (see above)")
    print(f"  installed {len(todo)} packages; {disk_free(venv):.1f} GB free after", flush=True)


if __name__ == "__main__":
    main()
