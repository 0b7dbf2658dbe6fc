"""cdrun: where the wheel put the launcher, the daemon and libpg.

This module only locates the C programs and library the wheel installed
(it is not a Python rewrite of them): `python -m cdrun ARGS` runs the
launcher, and `libpg_dir()` gives the folders to compile and link a worker
against libpg:

    inc, lib = cdrun.libpg_dir()
    cc worker.c -I"$inc" -L"$lib" -Wl,-rpath,"$lib" -lpg
"""
import os
from importlib import metadata

__all__ = ["bin_path", "libpg_dir", "__version__"]

try:
    __version__ = metadata.version("cdrun")
except metadata.PackageNotFoundError:   # imported from a source tree
    __version__ = "unknown"


def _installed(rel):
    """The absolute path of the file the wheel installed as rel (bin/cdrun,
    lib/libpg.so...), whatever the scheme (venv, --user, --prefix): the
    distribution's RECORD lists it relative to site-packages (pip
    shortens ../../../lib/x to ../../x where it can)."""
    for f in metadata.files("cdrun") or ():
        path = os.path.normpath(str(f.locate()))
        if path.endswith(os.sep + rel) and os.path.exists(path):
            return path
    raise FileNotFoundError("cdrun: %s is not installed with this package "
                            "(reinstall the wheel)" % rel)


def bin_path(name="cdrun"):
    """The installed binary name (cdrun or rdzvd)."""
    return _installed("bin/" + name)


def libpg_dir():
    """(include folder, lib folder) of the installed libpg: pg.h and
    libpg.so / libpg.a / pkgconfig/libpg.pc."""
    lib = os.path.dirname(_installed("lib/libpg.so"))
    inc = os.path.dirname(_installed("include/pg.h"))
    return inc, lib
