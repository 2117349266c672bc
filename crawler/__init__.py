"""Incremental web re-crawler."""

import os

# The planner's numpy and scipy work is on small matrices, where OpenBLAS's worker threads
# only contend with the fetch loop for the cores (a prior fit on a busy machine is then several
# times slower). Set before numpy is first imported; an operator's own value wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

__version__ = "0.1.0"
