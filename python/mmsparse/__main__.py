"""python -m mmsparse ARGS: the mmsparse command-line tool shipped in the package (bin/mmsparse)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cli_path() -> Path:
    return Path(__file__).resolve().parent / "bin" / "mmsparse"


def main() -> None:
    path = cli_path()
    if not path.exists():
        sys.exit(f"mmsparse: the CLI binary is missing at {path} (this build was made without "
                 "MMSPARSE_BUILD_CLI)")
    os.execv(path, [str(path), *sys.argv[1:]])


if __name__ == "__main__":
    main()
