"""Write the embedding known-answer vectors of this folder (see README.md): the project's default
embedder (float32) on ``tests/support/embedding_vectors.py``'s texts.

Run from the repository root with the project's Python and the text extra:
``HF_HUB_OFFLINE=1 .venv/bin/python tests/vectors/embedding/generate.py``. It prints the file's
sha256 for the README and ``tests/support/known_answers.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from embedding_vectors import FILE, VECTOR_DIR, embedder, record  # noqa: E402
from known_answers import write_vector  # noqa: E402


def main() -> None:
    write_vector(VECTOR_DIR / FILE, record(embedder()))


if __name__ == "__main__":
    main()
