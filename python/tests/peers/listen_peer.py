"""Listens as ``test_network_faults.py`` asks, inside a network namespace, and reports: ``ARGS``
is a JSON object with ``init`` (``ucp.init``'s options, or null not to call it first) and
``ip`` (``create_listener``'s). Prints ``{"port": P, "warnings": [...]}`` once listening, then
runs until its stdin closes; the test reads which addresses this process listens on."""
import asyncio
import json
import sys
import warnings

import ucp


async def main(args):
    if args["init"] is not None:
        ucp.init(args["init"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        listener = ucp.create_listener(lambda ep: None, ip=args["ip"])
    print(json.dumps({"port": listener.port, "warnings": [str(w.message) for w in caught]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    listener.close()


asyncio.run(main(json.loads(sys.argv[1])))
