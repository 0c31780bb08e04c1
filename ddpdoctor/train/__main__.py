"""``torchrun --nproc-per-node 2 -m ddpdoctor.train --strategy ddp ...``: one rank."""

import sys

from ddpdoctor.train.worker import main

sys.exit(main())
