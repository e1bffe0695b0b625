"""CUDA buffers: device-to-device tag messages, send_multi/recv_multi with device frames, and
the Dask comm moving a CuPy array. Needs CuPy and a GPU; skipped (with the reason) otherwise.
These have run only where a GPU was lent; see the issue notes for when."""
import asyncio

import numpy as np
import pytest

from conftest import pair, run

cupy = pytest.importorskip("cupy")
try:
    _GPUS = cupy.cuda.runtime.getDeviceCount()
except Exception:  # no driver, or no device
    _GPUS = 0
pytestmark = pytest.mark.skipif(_GPUS == 0, reason="no CUDA GPU")


def test_device_to_device(progress_mode):
    async def main():
        lf, client, server = await pair()
        assert client.cuda_support()
        for n in [0, 8, 1 << 20]:
            out = cupy.arange(n, dtype="u1")
            back = cupy.zeros(n, dtype="u1")
            await asyncio.gather(client.send(out), server.recv(back))
            assert bool((back == out).all()), f"{n} bytes"
        lf.close()

    run(main())


def test_send_multi_with_device_frames(fresh_ucp):
    async def main():
        lf, client, server = await pair()
        frames = [np.arange(10, dtype="u1"), cupy.arange(1 << 20, dtype="u1"), b"end"]
        _, got = await asyncio.gather(client.send_multi(frames), server.recv_multi())
        assert hasattr(got[1], "__cuda_array_interface__")
        assert bytes(got[0]) == bytes(range(10)) and bytes(got[2]) == b"end"
        assert bool((cupy.asarray(got[1]).view("u1") == frames[1]).all())
        lf.close()

    run(main())


def test_dask_comm_moves_a_cupy_array(fresh_ucp):
    pytest.importorskip("distributed")
    from distributed.comm import connect, listen
    from distributed.protocol import to_serialize

    async def main():
        received = asyncio.get_running_loop().create_future()

        async def handle(comm):
            received.set_result(await comm.read(deserializers=("cuda", "dask", "pickle")))
            await comm.close()

        async with listen("ucxa://127.0.0.1:0", handle) as listener:
            comm = await connect(listener.contact_address)
        x = cupy.arange(1 << 20, dtype="f4")
        await comm.write({"x": to_serialize(x)}, serializers=("cuda", "dask", "pickle"))
        msg = await asyncio.wait_for(received, 30)
        await comm.close()
        assert isinstance(msg["x"], cupy.ndarray)
        assert bool((msg["x"] == x).all())

    run(main(), timeout=60)
