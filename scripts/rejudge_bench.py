"""Re-score an inversion benchmark's outputs with the current judges (issue 34).

    python scripts/rejudge_bench.py OLD/bench.json OUT_DIR

Rebuilds the run's targets from its config (deterministic), reads its outputs, and recomputes
the judge columns (reader's rules, the gain in the guide and in multilingual-e5-small, the
Kneser–Ney fluency shares): a run of an earlier inverter is then comparable with a new run.
Writes OUT_DIR/bench.json and OUT_DIR/bench.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fre_protocol.text.embedder import SentenceTransformerEmbedder
from fre_protocol.text.inversion_bench import markdown, rejudge


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    old = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    result = rejudge(old, SentenceTransformerEmbedder(), log=lambda m: print(m, file=sys.stderr))
    result["rejudged_from"] = old.get("command")
    (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "bench.md").write_text(f"# Inversion benchmark (re-judged)\n\n`{old.get('command')}`\n\n" + markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
