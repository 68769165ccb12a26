"""``python3 -m gpuplan.validate.fit_stacks``: fit the one-GPU stacks (``kernels.main``)."""

import sys

from gpuplan.validate.fit_stacks.kernels import main

sys.exit(main())
