"""Helpers for the benchmarks: choosing the array library, and a small cluster launcher
(`run_cluster_server` + `run_cluster_workers`) that starts processes whose `ucp` endpoints
form a fully connected network, runs a function in each and collects the results.

Processes are started with the "spawn" method: a forked child would inherit the parent's UCX
state. So `worker_func` must be importable (defined at module level).
"""
import asyncio
import json
import logging
import os
import pickle
import sys

import numpy as np

from ucp._libs.utils import get_address
from ucp.utils import mp

logger = logging.getLogger("ucx")


def _ensure_cuda_device(devs, rank):
    """Make this process use GPU `devs[rank % len(devs)]`, before UCX sees any CUDA state."""
    import numba.cuda

    dev_id = devs[rank % len(devs)]
    os.environ["CUDA_VISIBLE_DEVICES"] = str(dev_id)
    logger.debug(f"{dev_id=}, {rank=}")
    numba.cuda.current_context()


def get_allocator(object_type: str, rmm_init_pool_size: int, rmm_managed_memory: bool):
    """The array module to allocate benchmark buffers with.

    Parameters
    ----------
    object_type: str
        "numpy", "cupy" or "rmm" (CuPy allocating from an RMM pool).
    rmm_init_pool_size: int
        Initial RMM pool size, for "rmm" (None: RMM's default).
    rmm_managed_memory: bool
        For "rmm": use CUDA managed memory.

    Returns
    -------
    The ``numpy`` or ``cupy`` module.
    """
    if object_type == "numpy":
        return np

    import cupy

    if object_type == "rmm":
        import rmm
        from rmm.allocators.cupy import rmm_cupy_allocator

        rmm.reinitialize(
            pool_allocator=True,
            managed_memory=rmm_managed_memory,
            initial_pool_size=rmm_init_pool_size,
        )
        cupy.cuda.set_allocator(rmm_cupy_allocator)
    return cupy


async def send_pickled_msg(ep, obj):
    await ep.send_obj(pickle.dumps(obj))


async def recv_pickled_msg(ep):
    return pickle.loads(await ep.recv_obj())


def _server_process(q, server_file, n_workers):
    import ucp

    async def run():
        addresses = {}
        results = {}

        async def register_worker(ep):
            rank, ip, port = await recv_pickled_msg(ep)
            addresses[rank] = (ip, port)
            while len(addresses) != n_workers:
                await asyncio.sleep(0.1)
            await send_pickled_msg(ep, addresses)
            results[rank] = await recv_pickled_msg(ep)

        listener = ucp.create_listener(register_worker)
        info = {"address": get_address(), "port": listener.port}
        if server_file is None:
            json.dump(info, sys.stdout)
            sys.stdout.flush()
        else:
            with open(server_file, mode="w") as f:
                json.dump(info, f)

        while len(results) != n_workers:
            await asyncio.sleep(0.1)
        return results

    results = asyncio.new_event_loop().run_until_complete(run())
    for rank in range(n_workers):
        q.put(results[rank])


def _run_cluster_server(server_file, n_workers, ucx_options_list=None):
    """Start the process that synchronises `n_workers` workers.

    It waits until every worker has connected and sent its listener address, sends each
    worker the addresses of all, then collects each worker's result.

    Parameters
    ----------
    server_file: str or None
        File the server writes its address and port to, as JSON `{"address": ..., "port": ...}`
        (None: print that JSON to stdout).
    n_workers: int
        Number of workers in the whole cluster.
    ucx_options_list: list of dict
        UCX options of each worker (the server itself uses UCX's defaults).

    Returns
    -------
    (process, queue): the server process (started) and the queue that will receive the
    result of each worker, in rank order.
    """
    q = mp.Queue()
    # `ucx_options_list` holds one dict per worker; the coordinating server keeps UCX's defaults
    # (UCX-Py passed the whole list to `ucp.init`, which failed).
    p = mp.Process(target=_server_process, args=(q, server_file, n_workers))
    p.start()
    return p, q


def run_cluster_server(server_file, n_workers, ucx_options_list=None):
    """Blocking `_run_cluster_server`: returns the list of the workers' results, by rank."""
    p, q = _run_cluster_server(server_file=server_file, n_workers=n_workers, ucx_options_list=ucx_options_list)
    # Drain the queue before joining: a process with unflushed queue data cannot exit.
    ret = [q.get() for _ in range(n_workers)]
    p.join()
    assert not p.exitcode
    return ret


def _worker_process(server_info, num_node_workers, rank, ucx_options_list, ensure_cuda_device, func, args):
    if ensure_cuda_device is True:
        _ensure_cuda_device(args.devs, rank % num_node_workers)

    import ucp

    if ucx_options_list is not None:
        ucp.init(ucx_options_list[rank])

    async def run():
        eps = {}

        async def accept_peer(ep):
            peer_rank = np.empty((1,), dtype=np.uint64)
            await ep.recv(peer_rank)
            assert peer_rank[0] not in eps
            eps[peer_rank[0]] = ep

        listener = ucp.create_listener(accept_peer)

        logger.debug(f"Sending message info to {server_info=}, {rank=}")
        server_ep = await ucp.create_endpoint(server_info["address"], server_info["port"])
        await send_pickled_msg(server_ep, (rank, get_address(), listener.port))

        logger.debug(f"Receiving network info from server {rank=}")
        workers_info = await recv_pickled_msg(server_ep)
        n_workers = len(workers_info)

        # Each worker connects to the higher ranks and is connected to by the lower ones.
        logger.debug(f"Creating endpoints to network {rank=}")
        for i in range(rank + 1, n_workers):
            ip, port = workers_info[i]
            eps[i] = await ucp.create_endpoint(ip, port)
            await eps[i].send(np.array([rank], dtype=np.uint64))

        while len(eps) != n_workers - 1:
            await asyncio.sleep(0.1)

        logger.debug(f"Running worker {rank=}")
        if asyncio.iscoroutinefunction(func):
            results = await func(rank, eps, args)
        else:
            results = func(rank, eps, args)
        await send_pickled_msg(server_ep, results)

    asyncio.new_event_loop().run_until_complete(run())


def _run_cluster_workers(
    server_info,
    num_workers,
    num_node_workers,
    node_idx,
    worker_func,
    worker_args=None,
    ucx_options_list=None,
    ensure_cuda_device=False,
):
    """Start this node's `num_node_workers` worker processes (not joined).

    Each worker connects to the server started by `run_cluster_server()`, learns the
    listener addresses of all workers, connects to them, then runs
    `worker_func(rank, eps, worker_args)` (a function or coroutine function; `eps` maps peer
    rank to `ucp.Endpoint`) and sends its return value to the server.

    Parameters
    ----------
    server_info: str or dict
        The file written by `run_cluster_server()`, or a dict with keys "address" and "port".
    num_workers: int
        Number of workers in the whole cluster (every node runs `num_node_workers`).
    num_node_workers: int
        Number of workers on this node.
    node_idx: int
        Index of this node in `[0, num_nodes)`; ranks are `node_idx * num_node_workers + i`.
    worker_func: callable
        Must be importable (module level): the workers are spawned processes.
    worker_args: object
        Passed to `worker_func`.
    ucx_options_list: list of dict
        UCX options of each worker, by rank.
    ensure_cuda_device: bool
        Set `CUDA_VISIBLE_DEVICES` from `worker_args.devs` and the rank, and create the CUDA
        context, before the worker imports `ucp` (so each worker uses its own GPU and its
        nearest network device).

    Returns
    -------
    list of the started processes.
    """
    if isinstance(server_info, str):
        with open(server_info) as f:
            server_info = json.load(f)
    elif not isinstance(server_info, dict):
        raise ValueError(
            "server_info must be the path to a server file, or a dictionary with the unpacked values."
        )

    processes = []
    for worker_num in range(num_node_workers):
        rank = node_idx * num_node_workers + worker_num
        p = mp.Process(
            target=_worker_process,
            args=(
                server_info,
                num_node_workers,
                rank,
                ucx_options_list,
                ensure_cuda_device,
                worker_func,
                worker_args,
            ),
        )
        p.start()
        processes.append(p)
    return processes


def run_cluster_workers(
    server_info,
    num_workers,
    num_node_workers,
    node_idx,
    worker_func,
    worker_args=None,
    ucx_options_list=None,
    ensure_cuda_device=False,
):
    """Blocking `_run_cluster_workers`: waits for this node's workers and checks they succeeded."""
    processes = _run_cluster_workers(
        server_info=server_info,
        num_workers=num_workers,
        num_node_workers=num_node_workers,
        node_idx=node_idx,
        worker_func=worker_func,
        worker_args=worker_args,
        ucx_options_list=ucx_options_list,
        ensure_cuda_device=ensure_cuda_device,
    )
    for p in processes:
        p.join()
        assert not p.exitcode
