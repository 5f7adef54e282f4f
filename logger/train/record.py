"""The training record (``training.json``) every training command writes beside its model:
its recipe and command line scrubbed (:mod:`glance_law.scrub`: no credential of a location is
stored), written atomically and never through a link (:func:`glance_law.data.outputs.write_file`)."""
from __future__ import annotations

import json
from pathlib import Path

from glance_law.data.outputs import write_file
from glance_law.scrub import command_line, scrub_doc

__all__ = ["command_line", "write_training_record"]

RECORD = "training.json"


def write_training_record(out, doc: dict) -> Path:
    """Write ``doc`` (every string scrubbed, keys included) as ``out/training.json``; returns its path."""
    path = Path(out) / RECORD
    write_file(path, json.dumps(scrub_doc(doc), indent=2, sort_keys=True, default=str) + "\n")
    return path
