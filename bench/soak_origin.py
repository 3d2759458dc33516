"""The soak's origin (bench/soak.sh): a pool of WORKERS working WORK seconds per request, a
queue of QUEUE behind them (503 when it is full), over HTTP/1.1 with keep-alive.

Unlike `tidegate origin`, it counts every request head it receives in a file, COUNT_FILE, the
moment the bytes are read, so that its count is exact even when it is killed with SIGKILL
(the file outlives the process) and needs no request to read it.

    python3 bench/soak_origin.py PORT COUNT_FILE [WORKERS] [WORK_SECONDS] [QUEUE]
"""

import asyncio
import os
import sys

port, count_file = int(sys.argv[1]), sys.argv[2]
workers = int(sys.argv[3]) if len(sys.argv) > 3 else 10
work = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
queue = int(sys.argv[5]) if len(sys.argv) > 5 else 100

count_fd = os.open(count_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
arrived = 0


def counted():
    global arrived
    arrived += 1
    # A fixed width, so that a shorter number never leaves digits of a longer one behind.
    os.pwrite(count_fd, b"%20d\n" % arrived, 0)


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"
FULL = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 5\r\n\r\nfull\n"
BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbad\n"


class Pool:
    def __init__(self):
        self.workers = asyncio.Semaphore(workers)
        self.held = 0  # working or queued

    async def serve(self):
        if self.held >= workers + queue:
            return FULL
        self.held += 1
        try:
            async with self.workers:
                await asyncio.sleep(work)
            return OK
        finally:
            self.held -= 1


class Connection(asyncio.Protocol):
    def __init__(self, pool):
        self.pool = pool
        self.buffer = b""
        self.body_left = 0
        self.requests = asyncio.Queue()
        self.transport = None
        self.task = None

    def connection_made(self, transport):
        self.transport = transport
        self.task = asyncio.ensure_future(self.answer())

    def data_received(self, data):
        self.buffer += data
        while True:
            if self.body_left:
                taken = min(self.body_left, len(self.buffer))
                self.buffer = self.buffer[taken:]
                self.body_left -= taken
                if self.body_left:
                    return
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end].lower(), self.buffer[end + 4:]
            counted()
            length, close = 0, b"\r\nconnection: close" in head
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name == b"content-length":
                    length = int(value.strip() or b"0")
                elif name == b"transfer-encoding":
                    length = -1
            if length < 0:
                self.requests.put_nowait(None)
                return
            self.body_left = length
            self.requests.put_nowait(close)

    def connection_lost(self, exc):
        if self.task is not None:
            self.task.cancel()

    async def answer(self):
        # One request at a time, in order: the proxy does not pipeline.
        while True:
            close = await self.requests.get()
            if close is None:
                self.transport.write(BAD)
                self.transport.close()
                return
            self.transport.write(await self.pool.serve())
            if close:
                self.transport.close()
                return


async def main():
    pool = Pool()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(pool), "127.0.0.1", port, backlog=1024)
    print(f"soak origin on 127.0.0.1:{port}: {workers} workers of {work}s, queue {queue}", flush=True)
    await server.serve_forever()


asyncio.run(main())
