#!/usr/bin/env python3
"""Publishes ports of the local node's network namespace on this machine's
loopback (hack/lib/node.sh): the only way into that namespace from outside.

    netns-forward.py NETNS_PATH LISTEN_HOST:PORT=TARGET_HOST:PORT ...

Each listening socket is made here, in this machine's network namespace; then
the process enters NETNS_PATH, so every connection it makes for a client
reaches TARGET inside the node's namespace and nowhere else. Bytes are copied
both ways until either side closes. Stops on SIGTERM.
"""
import asyncio
import ctypes
import os
import signal
import socket
import sys

CLONE_NEWNET = 0x40000000


def enter_netns(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def split(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()


def handler(target):
    async def handle(client_reader, client_writer):
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*target), 5)
        except (OSError, asyncio.TimeoutError):
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))
        writer.close()
        client_writer.close()

    return handle


async def serve(listeners):
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    servers = [await asyncio.start_server(handler(target), sock=sock) for sock, target in listeners]
    print("forwarding", ", ".join(f"{s.getsockname()} -> {t}" for s, t in listeners), flush=True)
    await stop.wait()
    for s in servers:
        s.close()


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    listeners = []
    for spec in sys.argv[2:]:
        listen, _, target = spec.partition("=")
        host, port = split(listen)
        if not host.startswith("127."):
            print(f"netns-forward: {listen}: only loopback addresses are published", file=sys.stderr)
            return 2
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
        listeners.append((sock, split(target)))
    enter_netns(sys.argv[1])
    asyncio.run(serve(listeners))
    return 0


if __name__ == "__main__":
    sys.exit(main())
