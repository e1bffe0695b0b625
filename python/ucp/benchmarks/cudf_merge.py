"""UCX-Py's cuDF merge benchmark, with its command line: every worker (one per device in
``--devs``, times ``--chunks-per-dev``) hash-partitions two cuDF tables across the workers,
exchanges the parts over ``ucp`` endpoints and merges locally. Needs cuDF, CuPy and RMM; the
same benchmark on host memory is ``ucp.benchmarks.numpy_merge``. (``--hosts``, UCX-Py's SSH
launcher, is not offered here; start ``--server`` and the workers by hand for several nodes.)"""
from ucp.benchmarks.merge import main

if __name__ == "__main__":
    main("cudf")
