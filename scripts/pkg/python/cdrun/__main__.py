"""python -m cdrun ARGS: runs the installed cdrun launcher with ARGS (it
replaces this process: signals and the exit status are cdrun's own)."""
import os
import sys

from cdrun import bin_path


def main():
    exe = bin_path("cdrun")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
