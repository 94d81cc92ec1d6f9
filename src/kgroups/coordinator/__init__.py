"""The group coordinator: sans-IO core, wire adapter, store and asyncio server."""
