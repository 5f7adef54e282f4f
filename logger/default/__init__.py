"""The embedded default: the 4-layer Llama target (``target/``) and its block head (``block/``).

Both folders ship inside the ``glance_log`` package (in the wheel as package data) and are
found through :mod:`importlib.resources`, never relative to the current directory. Set
``$GLANCE_MODELS`` to a folder holding ``target/`` and ``block/`` to use other files (for
example a freshly trained default, see docs/default.md). Training writes to these folders:
``python -m glance_log.train.target --out logger/default/target`` from a checkout.
"""
from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from glance_law.errors import GlanceError

__all__ = ["ENV", "models_root", "target_path", "block_path"]

ENV = "GLANCE_MODELS"


def models_root() -> Path:
    """The folder holding ``target/`` and ``block/``: ``$GLANCE_MODELS`` when set, else this
    package's own folder (``glance_log/default`` of the installed package)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    root = files(__name__)
    if not isinstance(root, Path):      # e.g. a zipped install: from_pretrained needs real files
        raise GlanceError(f"the embedded default model is not on the file system ({root}); install "
                          f"glance-law unzipped or set ${ENV} to a folder with target/ and block/")
    return root


def target_path() -> Path:
    """The embedded target model folder (a Hugging Face ``LlamaForCausalLM`` folder)."""
    return models_root() / "target"


def block_path() -> Path:
    """The embedded block head folder (``glance_log.heads.BlockHead``)."""
    return models_root() / "block"
