"""setup.py: what pyproject.toml cannot say for a wheel of prebuilt binaries.

The staged tree (scripts/pkg/wheel.sh) holds bin/cdrun, bin/rdzvd, lib/,
include/, share/ and VERSION beside this file.  The binaries go in the
wheel's scripts (the environment's bin/), libpg and its headers in its data
(the environment's lib/ and include/, so that cdrun finds lib/libpg.so
beside its bin/ as after `make install`), and the wheel is tagged
py3-none-<platform>: the binaries do not depend on the Python version.
"""
import os

from setuptools import setup
try:
    from setuptools.command.build_scripts import build_scripts
except ImportError:     # setuptools < 69 (Debian 12's 66): distutils' own
    from distutils.command.build_scripts import build_scripts
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


class BinaryWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class CopyBinaries(build_scripts):
    """The scripts are ELF binaries: copied as they are (setuptools would
    read them as Python to rewrite a #! line)."""

    def copy_scripts(self):
        self.mkpath(self.build_dir)
        outfiles = []
        for script in self.scripts:
            dst = os.path.join(self.build_dir, os.path.basename(script))
            self.copy_file(script, dst)
            os.chmod(dst, 0o755)
            outfiles.append(dst)
        return outfiles, outfiles


def tree(top):
    """data_files entries for every file under top, by folder."""
    out = []
    for d, _, files in os.walk(os.path.join(HERE, top)):
        rel = os.path.relpath(d, HERE)
        out.append((rel, [os.path.join(rel, f) for f in sorted(files)]))
    return out


with open(os.path.join(HERE, "VERSION")) as f:
    version = f.read().strip()

setup(
    version=version,
    scripts=["bin/cdrun", "bin/rdzvd"],
    data_files=tree("lib") + tree("include") + tree("share"),
    cmdclass={"bdist_wheel": BinaryWheel, "build_scripts": CopyBinaries},
)
