"""A torch.distributed.TCPStore server for the processes of a ucx::group
(group_torch_store_test.cpp): the store of a torchrun job, hosted by Python.

    group_torch_store_host.py WORLD_SIZE

The server listens on 127.0.0.1, on a port the kernel picks, and does not
wait for workers (WORLD_SIZE is given to the store as it is, or None for
"none"). It prints "port N", then answers commands read from stdin, one a
line, until the end of its input:

    get KEY     -> "value HEX" (the value, hex-encoded; waits for the key)
    check KEY   -> "check True" or "check False" (whether the key is set
                   within a second; TCPStore of torch 1.13 has no check())
    num_keys    -> "num_keys N"

Keys are those of a Python user of the store: the server holds them under
"/" + KEY.
"""
import sys
from datetime import timedelta

import torch.distributed as dist


def say(*words):
    print(*words, flush=True)


def is_set(store, key):
    try:
        store.wait([key], timedelta(seconds=1))
        return True
    except RuntimeError:
        return False


def main():
    world_size = None if sys.argv[1] == "none" else int(sys.argv[1])
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        world_size,
        True,
        timedelta(seconds=60),
        wait_for_workers=False,
    )
    say("port", store.port)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "get":
            say("value", store.get(words[1]).hex())
        elif words[0] == "check":
            say("check", is_set(store, words[1]))
        elif words[0] == "num_keys":
            say("num_keys", store.num_keys())
        else:
            sys.exit(f"unknown command {line.strip()!r}")


if __name__ == "__main__":
    main()
