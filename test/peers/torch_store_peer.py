"""The Python side of the torch_store test: a torch.distributed.TCPStore that
exchanges keys with the C++ side of the test.

    torch_store_peer.py master        # TCPStore server; prints "port N"
    torch_store_peer.py client PORT   # client of the C++ side's server

It prints "ready" once its keys are set, reads "go" from stdin, checks what
the C++ side set, prints "num_keys N", waits for the key "late" (set by the
C++ side after reading that line), prints "late VALUE", sets "late2", reads
"bye" and prints "ok". A failed check exits with an error.
"""
import socket
import sys
from datetime import timedelta

import torch.distributed as dist


def say(*words):
    print(*words, flush=True)


def expect(got, want, what):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def main():
    mode = sys.argv[1]
    if mode == "master":
        # A free port: the store's constructor waits for the C++ worker.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        say("port", port)
        store = dist.TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=30))
    else:
        store = dist.TCPStore("127.0.0.1", int(sys.argv[2]), 2, False, timedelta(seconds=30))

    store.set("py_key", "py_value")
    expect(store.add("py_counter", 5), 5, "add")
    store.set("py_binary", bytes([0, 255, 10]))
    say("ready")

    expect(sys.stdin.readline().strip(), "go", "command")
    expect(store.get("cpp_key"), b"cpp_value", "get cpp_key")
    expect(store.add("py_counter", 0), 7, "add after the C++ add")
    expect(store.get("cpp_counter"), b"-3", "cpp_counter")
    expect(store.compare_set("cas", "first", "second"), b"second", "compare_set")
    expect(store.compare_set("cas", "nope", "third"), b"second", "compare_set mismatch")
    store.wait(["cpp_key", "cas"])
    store.wait(["py_key"], timedelta(seconds=5))
    expect(store.delete_key("cpp_delete_me"), True, "delete_key")
    expect(store.delete_key("cpp_delete_me"), False, "delete_key again")
    expect(store.delete_key("py_binary"), False, "delete_key of a key deleted by C++")
    say("num_keys", store.num_keys())
    say("late", store.get("late").decode())
    store.set("late2", "from python")
    # The server (of a master) stays until the C++ side has read late2.
    expect(sys.stdin.readline().strip(), "bye", "command")
    say("ok")


if __name__ == "__main__":
    main()
