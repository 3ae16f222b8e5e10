"""`python -m tfx_hydra.reproduce RUN_ID`."""

import sys

from tfx_hydra.reproduce import main

sys.exit(main())
