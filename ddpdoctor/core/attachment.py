"""What a rank's watch watches: one small JSON file per rank, beside the events file.

Written once when a watch attaches, read by ``run`` for its report, so that "nothing
found" is never said over a job where no model was watched. Kept out of the events file,
whose lines are findings and notes. No torch.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass

from ddpdoctor.core.contract import ATTACHED_FILE, ATTACHED_GLOB

SCHEMA = "ddpdoctor.attached/1"


@dataclass(frozen=True)
class Attachment:
    rank: int
    model: str     # the class of the module watched
    wrapper: str   # "ddp", "fsdp1", "fsdp2" or "module"
    how: str       # "at DDP's construction", "at the first step of its optimizer (...)"
    time: float = 0.0

    def write(self, events_path: str) -> None:
        """Beside ``events_path``; a failure to write must not stop training."""
        path = os.path.join(os.path.dirname(os.path.abspath(events_path)),
                            ATTACHED_FILE.format(rank=self.rank))
        try:
            with open(path, "w") as f:
                json.dump({"schema": SCHEMA, **asdict(self)}, f)
        except OSError:
            pass


def read_all(directory: str, since: float = 0.0) -> list[Attachment]:
    """Every rank's attachment written at ``since`` or later; unreadable files skipped."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, ATTACHED_GLOB))):
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read(1 << 16))
            if data.get("schema") != SCHEMA or float(data["time"]) < since:
                continue
            out.append(Attachment(int(data["rank"]), str(data["model"])[:80],
                                  str(data["wrapper"])[:16], str(data["how"])[:120],
                                  float(data["time"])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return out
