#!/usr/bin/env python3
"""The layer rule of lib/ (docs/design/architecture.md#the-layers).

  layer_rule.py SOURCE_DIR [SANS_IO_SOURCE ...]

- Every source file of lib/ lives in a folder of LAYERS; none at lib/'s root.
- A file includes private headers only from its own folder or from folders of
  a lower layer. EXCEPTIONS may list includes that break the rule (it lists
  none); a listed include that no longer exists fails the check too, so the
  list only shrinks.
- The sans-io files (given on the command line, with their headers) include,
  through every project header they reach, no UCX, CUDA or Asio I/O header.

Prints each violation and exits 1 if there is one.
"""
import os
import re
import sys

# Lowest first. Folders of one layer do not include each other.
LAYERS = {
    "util": 0,
    "core": 1,
    "engine": 2,
    "store": 2,
    "gpu": 3,
    "connection": 4,
    "messaging": 5,
    "stream": 5,
    "rma": 5,
    "group": 6,
    "nccl": 7,
    "metrics": 7,
}

# (including file, included header) pairs that break the rule: none.
EXCEPTIONS = set()

# What a sans-io file may not reach: UCX, CUDA, and Asio other than its error
# codes.
FORBIDDEN_IN_SANS_IO = re.compile(r"^(ucp|ucs|uct|cuda|boost/asio/(?!error\.hpp$))")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def includes(path):
    with open(path, encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def main():
    root = sys.argv[1]
    lib = os.path.join(root, "lib")
    problems = []
    seen_exceptions = set()

    for entry in sorted(os.listdir(lib)):
        full = os.path.join(lib, entry)
        if os.path.isfile(full):
            problems.append(f"lib/{entry}: a file at lib/'s root (it belongs in a layer's folder)")
        elif entry not in LAYERS:
            problems.append(f"lib/{entry}/: a folder that is not a layer (add it to LAYERS)")

    for folder in sorted(LAYERS):
        base = os.path.join(lib, folder)
        if not os.path.isdir(base):
            continue
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, lib)
                for kind, header in includes(path):
                    if kind != '"' or "/" not in header:
                        continue
                    target = header.split("/", 1)[0]
                    if target not in LAYERS or target == folder:
                        continue
                    if LAYERS[target] < LAYERS[folder]:
                        continue
                    if (rel, header) in EXCEPTIONS:
                        seen_exceptions.add((rel, header))
                        continue
                    way = "up" if LAYERS[target] > LAYERS[folder] else "sideways"
                    problems.append(f"lib/{rel}: includes {header} ({way}: {folder} is layer "
                                    f"{LAYERS[folder]}, {target} is layer {LAYERS[target]})")

    for rel, header in sorted(set(EXCEPTIONS) - seen_exceptions):
        problems.append(f"EXCEPTIONS lists lib/{rel} -> {header}, which is gone: remove the entry")

    # The sans-io files: every project header they reach, followed.
    def resolve(header):
        for base in (lib, os.path.join(root, "include")):
            candidate = os.path.join(base, header)
            if os.path.isfile(candidate):
                return candidate
        return None

    for source in sys.argv[2:]:
        start = os.path.join(root, source)
        todo = [start]
        header = os.path.splitext(start)[0] + ".hpp"
        if os.path.isfile(header):
            todo.append(header)
        visited = set()
        while todo:
            path = todo.pop()
            if path in visited:
                continue
            visited.add(path)
            for _, inc in includes(path):
                if FORBIDDEN_IN_SANS_IO.match(inc):
                    problems.append(f"{source} (sans-io) reaches <{inc}> through "
                                    f"{os.path.relpath(path, root)}")
                found = resolve(inc)
                if found:
                    todo.append(found)

    for p in problems:
        print(p)
    print(f"layer rule: {len(problems)} violation(s), {len(EXCEPTIONS)} listed exception(s), "
          f"{len(sys.argv) - 2} sans-io file(s) checked")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
