"""Transports the send/recv benchmark can measure: `ucp_async` (the `ucp` asyncio API) and `tornado` (TCP)."""
