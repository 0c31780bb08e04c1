"""``torchrun ... -m ddpdoctor.check_worker``: the documented entry point of the check
inside someone else's launcher. The worker itself is ``ddpdoctor.check.worker``."""

import sys

from ddpdoctor.check.worker import main

if __name__ == "__main__":
    sys.exit(main())
