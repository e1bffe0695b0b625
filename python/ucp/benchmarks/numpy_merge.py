"""``cudf_merge`` on host memory with NumPy tables: the same command line, cluster and report,
so it runs on machines without a GPU. ``python -m ucp.benchmarks.numpy_merge -d 0,1 -c 100000
--iter 5``: two workers, 100 000 rows per table each. With few enough rows the report checks
the result's row count against a merge of all tables in one process."""
from ucp.benchmarks.merge import main

if __name__ == "__main__":
    main("numpy")
