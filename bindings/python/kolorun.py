#!/usr/bin/env python3
"""kolorun for a pip-installed kolo: replaces itself with the launcher
binary installed inside the kolo package (site-packages/kolo/bin/kolorun),
keeping the arguments, environment and process id. pip installs this file
as `kolorun` in the environment's bin/ with the environment's interpreter.

The binary is found through the installed distribution's metadata, not by
importing kolo (which would import torch and take seconds)."""
import os
import sys
from importlib import metadata


def main():
    try:
        exe = str(metadata.distribution("kolo").locate_file("kolo/bin/kolorun"))
    except metadata.PackageNotFoundError:
        sys.exit("kolorun: the kolo package is not installed for %s: "
                 "pip install --no-build-isolation <kolo checkout>" % sys.executable)
    if not os.access(exe, os.X_OK):
        sys.exit("kolorun: %s is missing; reinstall kolo "
                 "(pip install --no-build-isolation --force-reinstall <kolo checkout>)" % exe)
    os.execv(exe, [sys.argv[0]] + sys.argv[1:])


if __name__ == "__main__":
    main()
