"""Which texts a change to the reader's rules judges differently (issue 34).

    python scripts/rules_diff.py --baseline REV [--json OUT]

Loads ``fre_protocol/text/rules.py`` as it was at ``REV`` beside the working tree's and judges
three sets with both: every distinct text of three words or more in docs/results' JSON (what the
project has published: synthetic texts, seeds, examples), the news sentences of the public pool
and the WordNet texts (real text: any change there is a false alarm). Prints the counts and each
published text judged differently with the rules each version finds broken; news and WordNet
texts judged differently are printed too (there should be none).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from compare_guided_inverter import module_at  # noqa: E402 - the script beside this one

from fre_protocol.text import rules  # noqa: E402
from fre_protocol.text.public_pool import news_texts, wordnet_texts  # noqa: E402

RULES = "fre_protocol/text/rules.py"
MIN_WORDS = 3  # shorter strings in the JSON are labels, not texts
MAX_CHARS = 400  # longer strings are commands and notes


def published_texts(folder: Path) -> list[str]:
    """Distinct strings of docs/results' JSON that look like texts, sorted."""
    found: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif (isinstance(x, str) and len(x.split()) >= MIN_WORDS and len(x) < MAX_CHARS
              and not x.startswith(("fre-e2t", "python", "/"))):
            found.add(x)

    for path in sorted(folder.glob("*.json")):
        walk(json.loads(path.read_text()))
    return sorted(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision whose rules are compared with the tree's")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    old = module_at(args.baseline, RULES)
    sets = {"published": published_texts(ROOT / "docs" / "results"),
            "news": [t for part in news_texts().values() for t in part], "wordnet": wordnet_texts()}
    result: dict[str, Any] = {"command": f"python scripts/rules_diff.py --baseline {args.baseline}", "sets": {}}
    for name, texts in sets.items():
        changed = [{"text": t, "before": old.check(t), "after": rules.check(t)}
                   for t in texts if old.passes(t) != rules.passes(t)]
        result["sets"][name] = {"texts": len(texts), "judged_differently": len(changed), "changed": changed}
        print(f"{name}: {len(changed)} of {len(texts)} judged differently")
        for c in changed:
            print(f"  {c['before']} -> {c['after']}: {c['text']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
