"""The UCXX multi-frame header as Python decodes it (through ucx-core's `wire::multi_frame`, which
crates/ucx-core/tests/wire_fuzz.rs fuzzes too). Random and mutated headers must decode or
be refused with UCXError, never raise anything else; and `recv_multi` refuses a peer that
announces headers without end. Cases per run: UCXA_TEST_FUZZ_CASES (default 20 000;
scripts/reliability.sh runs 1 000 000)."""
import asyncio
import os
import random

import pytest

import ucp
from conftest import pair, run
from ucp.framing import MultiHeader as _MultiHeader
from ucp.exceptions import UCXError

CASES = int(os.environ.get("UCXA_TEST_FUZZ_CASES", "20000"))


def check(header):
    """Decodes `header`; returns the frames, or None where it was refused as it must be."""
    try:
        more, frames = _MultiHeader.unpack(header)
    except UCXError:
        return None
    assert isinstance(more, bool)
    assert len(frames) <= _MultiHeader.FRAMES
    assert all(isinstance(c, bool) and 0 <= n < 1 << 64 for c, n in frames)
    return frames


def test_random_and_mutated_headers_decode_or_are_refused():
    rng = random.Random(15)
    decoded = refused = 0
    valid = _MultiHeader.pack_all([(rng.random() < 0.5, rng.randrange(1 << 40)) for _ in range(250)])
    for i in range(CASES):
        if i % 2:
            header = bytearray(rng.randbytes(_MultiHeader.SIZE))
        else:
            header = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 8)):
                header[rng.randrange(len(header))] = rng.randrange(256)
        if check(header) is None:
            refused += 1
        else:
            decoded += 1
    assert decoded and refused, (decoded, refused)  # both paths were exercised


def test_headers_of_the_wrong_length_are_refused():
    for n in (0, 1, _MultiHeader.SIZE - 1, _MultiHeader.SIZE + 1):
        with pytest.raises(UCXError, match=f"expected {_MultiHeader.SIZE} bytes, got {n}"):
            _MultiHeader.unpack(bytes(n))  # recv_multi always receives exactly SIZE bytes


def test_headers_without_end_are_refused(progress_mode, monkeypatch):
    """A peer that keeps announcing more headers is refused once its frames pass the limit,
    not once they have filled memory."""
    monkeypatch.setattr(ucp.framing, "MAX_FRAMES", 1000)

    async def main():
        lf, client, server = await pair()
        # Headers of 100 empty frames, each saying another follows.
        endless = _MultiHeader.pack_all([(False, 0)] * 101)[0]

        async def flood():
            for _ in range(20):
                await client.send(endless)

        sender = asyncio.ensure_future(flood())
        with pytest.raises(UCXError, match="more than 1000 frames"):
            await server.recv_multi()
        assert server.closed()
        await sender
        client.abort()
        lf.close()

    run(main())
