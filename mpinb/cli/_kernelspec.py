"""Installing the MPI kernel's spec (``kernel/``: kernel.json and logos) where Jupyter finds it."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from ..common._ranges import rank_count

KERNEL_NAME = "mpinb"


def source_dir() -> str:
    """The spec shipped in the wheel (``mpinb/kernelspec``), or ``kernel/`` of a source checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the mpinb package
    for candidate in (os.path.join(here, "kernelspec"), os.path.join(os.path.dirname(here), "kernel")):
        if os.path.isfile(os.path.join(candidate, "kernel.json")):
            return candidate
    raise FileNotFoundError("the kernel spec (kernel/kernel.json) is missing from this installation")


def render(directory: str, ranks: int | None = None) -> str:
    """Write the spec into ``directory/mpinb``, pointing at this Python, with ``ranks`` ranks."""
    target = os.path.join(directory, KERNEL_NAME)
    shutil.copytree(source_dir(), target, dirs_exist_ok=True)
    path = os.path.join(target, "kernel.json")
    with open(path) as handle:
        spec = json.load(handle)
    spec["argv"][0] = sys.executable
    if ranks is not None:
        spec["env"]["MPINB_RANKS"] = str(rank_count(ranks, "--ranks"))
    with open(path, "w") as handle:
        json.dump(spec, handle, indent=2)
    return target


def install(user: bool = False, prefix: str | None = None, ranks: int | None = None) -> str:
    """Install the spec (``user``: in ~/.local; ``prefix``: under PREFIX/share/jupyter; neither:
    system-wide) and return where it went."""
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as scratch:
        rendered = render(scratch, ranks)
        return KernelSpecManager().install_kernel_spec(rendered, KERNEL_NAME, user=user, prefix=prefix)
