"""The pure core: estimation, scheduling, fingerprints, parsing and the capacity model, as
functions over plain data with no I/O and no clock reads (the daemon and the simulator call
the same code).

scipy is imported inside the functions that call it, not at the top of their modules: the
import takes about half a second, which every command would pay at start-up, though only the
estimators, the planner and capacity planning use it (``tests/unit/test_startup.py``)."""
