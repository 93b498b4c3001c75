"""Reader's rules: would a person accept this text as a sentence? (issue 34)

A cheap, transparent check that needs no model, so it can judge any inverter's output (the
language model that wrote a text cannot judge it fairly: it finds its own output likely). A text
passes when it breaks none of these rules (:data:`RULES`, in the order they are checked):

* ``finished`` — it ends a sentence: its last character is ``.``, ``!`` or ``?``, optionally
  followed by closing quotes or brackets, not in an ellipsis ("says more..."), its double
  quotes and brackets pair up ("in this instance (i." does not), and it has at least
  :data:`MIN_WORDS` words. A search cut off at its token budget ("The committee said that the")
  fails here;
* ``no_repeat`` — no word follows itself ("Nope, nope"; case and punctuation between ignored);
* ``no_task_talk`` — it does not talk about the task or the text itself: any pattern of
  :data:`TASK_TALK` ("this text", "this phrase", "the message", "your response", "adds a touch",
  "uses words like", "rewritten", "paraphrase", "here is", a sentence opening "This story
  highlights …", "I will ensure …", …), case-insensitive, on word boundaries;
* ``no_word_list`` — it is not a comma-separated word list: it fails when it holds a run of at
  least :data:`LIST_ITEMS` comma-separated items of at most :data:`LIST_ITEM_WORDS` words each
  (none holding a word of :data:`VERBISH`) and the text has no verb-ish token or is nothing but
  that run ("Fda, exerting prevention, malnutrition."), or a run of more than
  :data:`LIST_ITEMS` such items whatever follows ("Public, permission, seated, recorded: The
  problem is …"), or a bracketed list of at least :data:`LIST_ITEMS` such items ("The accent in
  question (france, crash, australian) is …") (:func:`has_verbish`: a common auxiliary or
  verb, or a word ending in -ed/-ing/-s after a subject pronoun…, kept crude on purpose: a
  list *with* a verb, "She bought apples, pears, plums and figs.", is a sentence), or a
  sentence of its own that is such a list ("Ebola, Flu, Health Issues. This is …"). A text whose
  sentences are mostly one or two words ("Pessimistic, billion, statistics. Nepotistical.")
  fails too: more than half its sentence pieces hold at most :data:`LIST_ITEM_WORDS` words;
* ``no_dangling_letter`` — it does not end in a lone letter other than "I"/"a" ("… and b.");
* ``no_broken_word`` — no word is cut in three by apostrophes ("don’m’re", "NHS’Risque’s"): two
  contractions in one word are the sampler's garble, not English; and no two lower-case words
  are glued by a full stop ("her/his/etc.typing", "etc.ty"), which also keeps out web and
  e-mail addresses ("cnn.com"), while abbreviations ("e.g.", "U.S.") pass.

:func:`check` returns the names of the broken rules (empty: it passes); :func:`passes` is the
yes/no; :func:`summary` is the metric over a set of texts (share passing, count per broken rule).
:func:`prefix_ok` is the subset that can already be judged on an unfinished prefix (the guided
search drops beams that break it).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

MIN_WORDS = 4
LIST_ITEMS = 3
LIST_ITEM_WORDS = 2

RULES = ("finished", "no_repeat", "no_task_talk", "no_word_list", "no_dangling_letter", "no_broken_word")

#: Phrases of a model talking about the task or about the text, not writing it.
TASK_TALK: tuple[str, ...] = (
    r"this (?:text|phrase|sentence|message|response|rewrite|version|passage|word|example)",
    r"the (?:message|sentence|phrase|text|prompt|keywords?|original)\b",
    r"your (?:response|sentence|text|message|answer)",
    r"adds? a (?:touch|sense|hint|layer) of",
    r"uses? (?:some )?(?:of )?(?:the |these )?words?(?: like)?",
    r"(?:these|the following) words",
    r"(?:above(?:-mentioned)?|aforementioned) (?:\w+ )?(?:text|phrase|sentence|statement|message|words?)",
    r"uses? (?:\w+ ){0,3}(?:adverbs?|adjectives?|nouns?|verbs?|idioms?|synonyms?|vocabulary)\b",
    r"this should read", r"this is an? (?:\w+ )?version",
    r"to enhance the", r"this adds", r"adds? context", r"the previous (?:statement|sentence|text)",
    r"rewrit\w*", r"paraphras\w*", r"here(?:'s| is| are)", r"sure[,!]", r"similar to this",
    # a comment on what was just written, opening a sentence ("This story highlights …"; inside
    # a quote it is a speaker's: 0 of 86,604 news sentences open a sentence with it)
    r"(?:^|(?<=[.!?] ))this (?:[\w-]+ ){0,2}(?:highlights|underscores|captures|conveys|emphasi[sz]es|illustrates|showcases)",
    r"I(?:'ll| will| can) (?:ensure to|keep adding|provide (?:it|that|this)|avoid that)",  # an assistant's offer
)
_TASK_TALK = re.compile(r"\b(?:" + "|".join(TASK_TALK) + r")", re.IGNORECASE)
_END = re.compile(r"[.!?][\"'”’)\]]*$")
_TRAILS_OFF = re.compile(r"\.\.[\"'”’)\]]*$")  # "...": a sentence left unfinished
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’-]*")
_DANGLING = re.compile(r"(?:^|\s)([B-HJ-Zb-z])[.!?\"'”’)\]]*$")
# A word cut in three by apostrophes, or two lower-case words glued by a full stop ("etc.typing";
# it catches web and e-mail addresses too, which no synthetic sentence should carry).
_BROKEN_WORD = re.compile(r"[A-Za-z]['’][A-Za-z]+['’][A-Za-z]|\b[a-z]{2,}\.[a-z]{2,}\b")
_PIECES = re.compile(r"[,;.!?:]+")
_SENTENCES = re.compile(r"(?<=[.!?])\s+")
_BRACKETED = re.compile(r"[(\[]([^()\[\]]*)[)\]]")
#: Auxiliaries, common verbs and subject pronouns: one of them makes a comma run a sentence.
VERBISH: frozenset[str] = frozenset(
    """is are was were be been being am has have had do does did can could will would shall should
    may might must get gets got make makes made take takes took say says said go goes went come
    comes came see sees saw know knows knew think thinks thought want wants need needs find finds
    found give gives gave tell tells told show shows showed use uses used help helps helped keep
    keeps kept let lets put puts seem seems become becomes became leave leaves left feel feels felt
    bring brings brought begin begins began run runs ran hold holds held live lives lived
    i you he she we they it there""".split()
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return [w.lower() for w in _WORD.findall(text)]


def has_verbish(text: str) -> bool:
    """A crude verb detector: a word of :data:`VERBISH`, or a word of 4+ letters ending in -ed or
    -ing (documented as crude: it only separates lists from clauses)."""
    return any(w in VERBISH or (len(w) >= 4 and w.endswith(("ed", "ing"))) for w in words(text))


def _repeats(text: str) -> bool:
    ws = words(text)
    return any(a == b for a, b in zip(ws, ws[1:], strict=False))


def _short_items(items: Sequence[str]) -> bool:
    """At least :data:`LIST_ITEMS` items, each of one to :data:`LIST_ITEM_WORDS` words."""
    return len(items) >= LIST_ITEMS and all(0 < len(words(p)) <= LIST_ITEM_WORDS for p in items)


def _word_list(text: str) -> bool:
    for inside in _BRACKETED.findall(text):  # keywords dropped in brackets: "(france, crash, australian)"
        if _short_items([p.strip() for p in inside.split(",")]):
            return True
    pieces = [p.strip() for p in _PIECES.split(text) if p.strip()]
    sizes = [len(words(p)) for p in pieces]
    run = best = 0
    for p, n in zip(pieces, sizes, strict=True):
        run = run + 1 if 0 < n <= LIST_ITEM_WORDS and not set(words(p)) & VERBISH else 0
        best = max(best, run)
    if best > LIST_ITEMS or (best >= LIST_ITEMS and (best == len(pieces) or not has_verbish(text))):
        return True  # nothing but the run: a -ing/-ed item does not make it a clause
    if any(_list_sentence(s) for s in _SENTENCES.split(text.strip())):
        return True  # a list standing as a sentence of its own: "Ebola, Flu, Health Issues. This is …"
    # Mostly one- or two-word fragments: "Pessimistic, billion, statistics. Nepotistical."
    return len(sizes) >= 2 and sum(1 for n in sizes if n <= LIST_ITEM_WORDS) * 2 > len(sizes) and not has_verbish(text)


def _list_sentence(sentence: str) -> bool:
    """One sentence that is nothing but :data:`LIST_ITEMS` or more short items and no verb."""
    return _short_items([p.strip() for p in re.split(r"[,;]", sentence) if p.strip()]) and not has_verbish(sentence)


def _unpaired(text: str) -> bool:
    """An odd number of straight double quotes, or an opening quote or bracket without its mate."""
    return (text.count('"') % 2 == 1 or text.count("“") != text.count("”")
            or text.count("(") != text.count(")") or text.count("[") != text.count("]"))


def prefix_problems(text: str) -> list[str]:
    """The rules an unfinished prefix already breaks (a later token cannot repair them)."""
    out = []
    if _repeats(text):
        out.append("no_repeat")
    if _TASK_TALK.search(text):
        out.append("no_task_talk")
    if _BROKEN_WORD.search(text):
        out.append("no_broken_word")
    return out


def prefix_ok(text: str) -> bool:
    return not prefix_problems(text)


def check(text: str) -> list[str]:
    """Names of the rules ``text`` breaks, in :data:`RULES` order (empty: a reader accepts it)."""
    t = text.strip()
    broken: set[str] = set(prefix_problems(t))
    if not _END.search(t) or _TRAILS_OFF.search(t) or _unpaired(t) or len(words(t)) < MIN_WORDS:
        broken.add("finished")
    if _word_list(t):
        broken.add("no_word_list")
    if _DANGLING.search(t):
        broken.add("no_dangling_letter")
    return [r for r in RULES if r in broken]


def passes(text: str) -> bool:
    return not check(text)


def summary(texts: Sequence[str]) -> dict[str, Any]:
    """Share of ``texts`` that pass, and how many break each rule (NaN share for no text)."""
    results = [check(t) for t in texts]
    broken: Counter[str] = Counter(r for res in results for r in res)
    n = len(results)
    return {
        "n": n,
        "pass_share": sum(1 for r in results if not r) / n if n else float("nan"),
        "broken": {r: broken.get(r, 0) for r in RULES},
        "rules": f"fre_protocol.text.rules ({', '.join(RULES)})",
    }


__all__ = [
    "LIST_ITEMS", "LIST_ITEM_WORDS", "MIN_WORDS", "RULES", "TASK_TALK", "VERBISH", "check", "has_verbish",
    "passes", "prefix_ok", "prefix_problems", "summary", "words",
]
