#!/usr/bin/env python3
"""Layering check: the folders of core/src are layers.

A file in core/src/<folder>/ may include headers of its own folder and of
the folders below it in LAYERS, never of a folder above it. A backend
folder of comm/ (comm/gloo, comm/shm, ...) is part of comm. Public headers
(core/include/kolo) lie below every folder and include none of core/src.

    scripts/layering-check.py            # exit 1 and one line per include that breaks it

scripts/include-check.sh runs it first, so CI fails on a break; the
layers are drawn in docs/developers/architecture.md.
"""
import os
import re
import sys

# Bottom to top. A folder may include those before it.
LAYERS = [
    "common",       # configuration, identity, errors, logging, value types
    "kernels",      # element-wise CPU arithmetic on raw buffers of every dtype
    "wire",         # every message that crosses ranks, and its encoding
    "timeline",     # the Chrome-trace timeline writer
    "autotune",     # the online tuner of fusion threshold and cycle time
    "rendezvous",   # stores, arrival, what a failed rank leaves behind
    "device",       # the device runtime seam: CUDA and the host stand-in
    "comm",         # data and control planes, one folder per backend
    "negotiation",  # controller, message table, response cache, fusion, stalls
    "execution",    # executor, fusion buffer, GPU path, Adasum, handle states
    "elastic",      # the worker side of elastic jobs
    "engine",       # the Engine, its queue, process sets and loop
    "ops",          # what every adapter shares: tensor submission, gradients
]
LEVEL = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src = os.path.join(root, "core", "src")
    public = os.path.join(root, "core", "include")
    problems = []
    unknown = set()
    for base, _, files in os.walk(src):
        rel = os.path.relpath(base, src)
        if rel == ".":
            continue
        folder = rel.split(os.sep)[0]
        if folder not in LEVEL:
            unknown.add(folder)
            continue
        for name in sorted(files):
            if not name.endswith((".h", ".cc", ".cu")):
                continue
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = m.group(1).split("/")[0]
                    if target == "kolo" or target == folder or target not in LEVEL:
                        continue
                    if LEVEL[target] > LEVEL[folder]:
                        problems.append("%s:%d: %s/ includes %s, but %s/ lies above %s/" % (
                            os.path.relpath(path, root), lineno, folder, m.group(1), target,
                            folder))
    for base, _, files in os.walk(public):
        for name in sorted(files):
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(1).split("/")[0] in LEVEL:
                        problems.append("%s:%d: a public header includes %s from core/src"
                                        % (os.path.relpath(path, root), lineno, m.group(1)))
    for folder in sorted(unknown):
        problems.append("core/src/%s/: not a layer; add it to LAYERS in %s" %
                        (folder, os.path.relpath(__file__, root)))
    for p in problems:
        print("layering check: " + p)
    if problems:
        print("layering check: %d includes go up; the layers, bottom first: %s. Move what "
              "both folders need into the lower one." % (len(problems), " < ".join(LAYERS)))
        return 1
    print("layering check: %d layers hold (%s)" % (len(LAYERS), " < ".join(LAYERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
