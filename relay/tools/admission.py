"""What the tool server lets in: requests read under a deadline, bodies parsed without surprises,
and sandbox slots shared fairly between clients.

DeadlineReader  the request socket under one deadline for the whole request (head and body)
parse_body      the code from a request body, or why the body is refused (any failure: a reason)
FairSlots  a fixed number of slots shared by clients (one rollout worker's ToolClient each). A
           request is admitted before its body is read (or refused: the server answers 429), then
           waits for a slot. A freed slot goes to the waiting client served least recently, FIFO
           within one client, so a client that queued many slow or hostile runs delays another
           client's request by at most one run per client ahead of it, not by its whole backlog.
"""

from __future__ import annotations

import io
import itertools
import json
import socket
import threading
import time
from collections import deque

# Integers longer than this are refused (400) rather than parsed: parsing is quadratic in the
# digits, and Python's own guard (sys.set_int_max_str_digits) can be switched off.
MAX_INT_DIGITS = 4300


def _parse_int(digits: str) -> int:
    if len(digits) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits)} digits (the limit is {MAX_INT_DIGITS})")
    return int(digits)


def parse_body(body: bytes) -> tuple[str | None, str]:
    """(the code, "") or (None, why the body is refused): every way a body can fail is a reason."""
    try:
        payload = json.loads(body.decode("utf-8"), parse_int=_parse_int)
    except UnicodeDecodeError as e:
        return None, f"request body is not UTF-8: {e}"
    except RecursionError:
        return None, "request body is not JSON the server accepts: nested too deeply"
    except ValueError as e:  # json.JSONDecodeError included
        return None, f"request body is not JSON the server accepts: {e}"
    if not isinstance(payload, dict) or not isinstance(payload.get("code"), str):
        return None, 'expected a JSON object {"code": "<python source>"}'
    return payload["code"], ""


class DeadlineReader(io.RawIOBase):
    """The request socket, read under one deadline for the whole request, head and body: a
    client that sends slowly (or stops half-way) is cut off at the deadline, not per recv()."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline, self.expired = sock, deadline, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.expired = True
            raise TimeoutError("the request did not arrive within the read deadline")
        self.sock.settimeout(remaining)
        try:
            return self.sock.recv_into(buffer)
        except TimeoutError:
            self.expired = True
            raise


class FairSlots:
    def __init__(self, slots: int, max_waiting: int, max_waiting_per_client: int):
        self.slots, self.max_waiting, self.max_waiting_per_client = slots, max_waiting, max_waiting_per_client
        self._lock = threading.Lock()
        self._free = slots
        self._admitted: dict[str, int] = {}  # client -> requests admitted and not yet running
        self._queues: dict[str, deque[threading.Event]] = {}  # client -> its waiters, in arrival order
        self._last_served: dict[str, int] = {}  # client -> when it last got a slot (a sequence number)
        self._running: dict[str, int] = {}
        self._clock = itertools.count()

    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(self._admitted.values())

    @property
    def running(self) -> int:
        with self._lock:
            return sum(self._running.values())

    def clients(self) -> int:
        with self._lock:
            return len(self._admitted.keys() | self._running.keys())

    def admit(self, client: str) -> str | None:
        """Reserve a place in line for `client`; None when admitted, else why not (the 429 reason)."""
        with self._lock:
            if sum(self._admitted.values()) >= self.max_waiting:
                return f"tool server full: {self.max_waiting} requests waiting"
            if self._admitted.get(client, 0) >= self.max_waiting_per_client:
                return f"tool server full for this client: {self.max_waiting_per_client} of its requests waiting"
            self._admitted[client] = self._admitted.get(client, 0) + 1
            return None

    def withdraw(self, client: str) -> None:
        """An admitted request that will not run (its body never came, or was not valid)."""
        with self._lock:
            self._drop_admitted(client)
            self._forget_if_idle(client)

    def acquire(self, client: str) -> None:
        """Wait for a slot (the request must have been admitted)."""
        with self._lock:
            if self._free > 0 and not any(self._queues.values()):
                self._free -= 1
                self._start(client)
                return
            ticket = threading.Event()
            self._queues.setdefault(client, deque()).append(ticket)
        ticket.wait()  # release() handed its slot to us and did the bookkeeping

    def release(self, client: str) -> None:
        with self._lock:
            self._running[client] -= 1
            if not self._running[client]:
                del self._running[client]
            waiting = [c for c, q in self._queues.items() if q]
            if waiting:
                nxt = min(waiting, key=lambda c: self._last_served.get(c, -1))  # ties: first to wait
                ticket = self._queues[nxt].popleft()
                if not self._queues[nxt]:
                    del self._queues[nxt]
                self._start(nxt)
                ticket.set()
            else:
                self._free += 1
            self._forget_if_idle(client)

    def _start(self, client: str) -> None:
        self._drop_admitted(client)
        self._running[client] = self._running.get(client, 0) + 1
        self._last_served[client] = next(self._clock)

    def _drop_admitted(self, client: str) -> None:
        self._admitted[client] -= 1
        if not self._admitted[client]:
            del self._admitted[client]

    def _forget_if_idle(self, client: str) -> None:
        # A client with nothing admitted or running starts afresh: the table stays as small as
        # the set of active clients.
        if client not in self._admitted and client not in self._running:
            self._last_served.pop(client, None)
