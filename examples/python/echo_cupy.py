"""The UCX-Py CuPy echo: the client sends a device array of zeros, the server receives it into
device memory, increments it on the GPU and sends it back, the client asserts every element is
1. Without CuPy or a GPU it says so and exits with status 2.

Run: python examples/python/echo_cupy.py   (127.0.0.1 only)
"""
import asyncio
import multiprocessing
import sys

N = 1 << 20


def have_gpu():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def server(port_queue):
    import cupy
    import ucp

    async def main():
        done = asyncio.get_running_loop().create_future()

        async def echo(ep):
            try:
                buf = cupy.empty(N, dtype="u1")
                await ep.recv(buf)
                buf += 1
                await ep.send(buf)
                await ep.close()
            except Exception as e:  # the client failed: end this process with the error
                done.set_exception(e)
            else:
                done.set_result(None)

        listener = ucp.create_listener(echo, ip="127.0.0.1")
        port_queue.put(listener.port)
        await done

    asyncio.run(main())


async def client(port):
    import cupy
    import ucp

    ep = await ucp.create_endpoint("127.0.0.1", port)
    if not ep.cuda_support():
        raise SystemExit("UCX loaded no CUDA transport (check UCX_TLS)")
    out = cupy.zeros(N, dtype="u1")
    back = cupy.empty_like(out)
    await ep.send(out)
    await ep.recv(back)
    assert bool((back == 1).all()), "the GPU increment did not come back"
    print(f"echo_cupy: {N} bytes of device memory went there and back, every byte is 1")
    await ep.close()


if __name__ == "__main__":
    if not have_gpu():
        print("echo_cupy: no CUDA GPU (or CuPy) here; nothing to run", file=sys.stderr)
        sys.exit(2)
    from ucp.utils import run_with_server, wait_for_port

    spawn = multiprocessing.get_context("spawn")
    q = spawn.Queue()
    p = spawn.Process(target=server, args=(q,))
    p.start()
    # If either side fails, the other is stopped and this exits non-zero within seconds.
    run_with_server(p, lambda: asyncio.run(client(wait_for_port(q, p))))
