"""Reader's rules (issue 34): each bad output quoted in the issue fails, fluent sentences pass."""

from __future__ import annotations

import pytest

from fre_protocol.text.rules import RULES, check, passes, prefix_ok, summary

BAD = {
    "Pessimistic, billion, statistics. Nepotistical.": "no_word_list",
    "This phrase adds a touch of humor to the situation.": "no_task_talk",
    "This text uses some words to enhance the message.": "no_task_talk",
    "Here is a sentence about the weather.": "no_task_talk",
    "Your response should mention the budget.": "no_task_talk",
    "The committee said on Tuesday that the": "finished",
    "Officials expect the new rules to take effect in": "finished",
    "Nope, nope, nope.": "no_repeat",
    "The the market fell sharply on Monday.": "no_repeat",
    "Stocks fell as investors weighed the news of b.": "no_dangling_letter",
    "Health, flu, vaccine, children, winter.": "no_word_list",
    "Good.": "finished",
    "The accent in question (france, crash, australian) is a crucial part to consider.": "no_word_list",
    "Urbanization, foreseeable threat. This adds context to the previous statement.": "no_task_talk",
    "Public, permission, seated, recorded, accessible: the problem is access.": "no_word_list",
    # read in a utility run's texts (ε = ∞, quick): talk about the text in other words
    "The above-mentioned phrase uses some common English adverbs to convey empathy.": "no_task_talk",
    "It uses vivid adjectives to describe the hospital.": "no_task_talk",
    # read in the utility run at ε = 8 with every centroid inverted (seed 1)
    'This should read "The misuse of medications can have devastating side effects."': "no_task_talk",
    "Babies should avoid harmful food. This is an extreme version with a focus on fda.": "no_task_talk",
    "Ebola: World Health Organization says more...": "finished",
    "The medical community should take into account that marijuana, in this instance (i.": "finished",
    "The government's policy-makers have taken an extra step, and it's about time they did it.\"": "finished",
    "This is where rescuers, the ones who don’m’re not taking care of themselves, are.": "no_broken_word",
    "The most vital action you can take for your health, it’s the NHS’Risque’s.": "no_broken_word",
    # read in the healthtweets demo at ε = 8: a word run whose -ing word made it look like a clause
    "Fda, exerting prevention, malnutrition.": "no_word_list",
    "Vaccines, growing concerns, children.": "no_word_list",
    # read in the healthtweets demo at ε = 8 (4382a58): two words glued by a full stop
    "The vaccine against hepatitis, also know by her/his/etc.typing.": "no_broken_word",
    "Visit cnn.com for more news and video.": "no_broken_word",
    # read in the healthtweets demo at ε = 8 (4382a58) and held-out bench draws: an assistant
    # commenting on what it wrote, and a list standing as a sentence before a real one
    "This suggests that health should take the spotlight, and I will ensure to provide it.": "no_task_talk",
    "This healthcare-related sentiment highlights a common challenge faced by those in need.": "no_task_talk",
    "A mother fears for her daughter. This story highlights the challenges of her journey.": "no_task_talk",
    "Ebola, Flu, Health Issues. This is not only an effective health emergency.": "no_word_list",
    # the same demo after those rules (4d71748): the offer and the glued word in other words
    "This suggests that health should take the spotlight, and I can provide it.": "no_task_talk",
    "The vaccine against hepatitis, also know by her/his/etc.ty, may have been tested.": "no_broken_word",
}

GOOD = [
    "The company said its profit rose 10 percent in the third quarter.",
    "Flu vaccines are now available for children over six months.",
    "She bought apples, pears, plums and figs at the market.",
    "Why did the minister resign?",
    '"We will not give up," he said.',
    "I think it will rain tomorrow (or so they say).",
    "The clinic uses new vaccines above the legal minimum.",
    "A new version of the flu vaccine is out. The old one was less effective.",
    "Don't say the O'Briens' dog wasn't there; it's the children's.",
    "Nurses, doctors and cleaners are striking for better pay.",
    "Waiting times, already long, are rising again.",
    "Prices rose 3.5 percent in the U.S. last year.",
    # a speaker's comment inside a quote, and a promise that is no assistant's
    '"This highlights that extremism is not limited to our cities," he said.',
    "I will get my flu shot tomorrow, and I will ensure my kids get theirs.",
    "Red, white and blue flags lined the street. The parade began at noon.",
]


@pytest.mark.parametrize(("text", "rule"), BAD.items())
def test_each_bad_example_breaks_its_rule(text: str, rule: str) -> None:
    assert rule in check(text)
    assert not passes(text)


@pytest.mark.parametrize("text", GOOD)
def test_fluent_sentences_pass(text: str) -> None:
    assert check(text) == []


def test_prefix_rules_are_the_unrepairable_ones() -> None:
    assert prefix_ok("The committee said that the")  # unfinished, but may still be finished
    assert not prefix_ok("This text uses")
    assert not prefix_ok("Nope nope")
    assert not prefix_ok("the ones who don’m’re") and prefix_ok("the ones who don’")


def test_summary_counts_shares_and_rules() -> None:
    s = summary([*GOOD, *BAD])
    assert s["n"] == len(GOOD) + len(BAD)
    assert s["pass_share"] == pytest.approx(len(GOOD) / s["n"])
    assert set(s["broken"]) == set(RULES)
    assert s["broken"]["no_task_talk"] >= 4
    assert summary([])["n"] == 0
