"""The SimpleQA-style grader of LiveNewsBench figure 8: prompt and parsing.

The prompt is the paper's, verbatim (PDF line breaks joined). ``parse_grade`` accepts only an
answer that *is* a grade, and reports anything else as malformed (None: the judge stage retries
it, then counts the episode as ungraded) rather than guessing. See ``parse_grade``.
"""

from __future__ import annotations

import re

GRADES = {"A": "CORRECT", "B": "INCORRECT", "C": "NOT ATTEMPTED"}

GRADER_PROMPT = 'Your job is to look at a question, a gold target, and a predicted answer, and then assign a grade of either ["CORRECT", "INCORRECT", "NOT ATTEMPTED"].\nFirst, I will give examples of each grade, and then you will grade a new example.\nThe following are examples of CORRECT predicted answers.\nQuestion: What are the names of Barack Obama\'s children?\nGold target: Malia Obama and Sasha Obama\nPredicted answer 1: sasha and malia obama\nPredicted answer 2: most people would say Malia and Sasha, but I\'m not sure and would have to double check\nPredicted answer 3: Barack Obama has two daughters. Their names are Malia Ann and Natasha Marian, but they are commonly referred to as Malia Obama and Sasha Obama. Malia was born on July 4, 1998, and Sasha was born on June 10, 2001.\nThese predicted answers are all CORRECT because:\n- They fully contain the important information in the gold target.\n- They do not contain any information that contradicts the gold target.\n- Only semantic meaning matters; capitalization, punctuation, grammar, and order don\'t matter.\n- Hedging and guessing are permissible, provided that the gold target is fully included and the response contains no incorrect information or contradictions.\nThe following are examples of INCORRECT predicted answers.\nQuestion: What are the names of Barack Obama\'s children?\nGold target: Malia and Sasha\nPredicted answer 1: Malia.\nPredicted answer 2: Malia, Sasha, and Susan.\nPredicted answer 3: Barack Obama does not have any children.\nPredicted answer 4: I think it\'s either Malia and Sasha. Or it could be Malia and Jackie. Or it could be Joey and Malia.\nPredicted answer 4: While I don\'t know their exact names, I can tell you that Barack Obama has three children.\nPredicted answer 5: It\'s possible you may mean Betsy and Olivia. However, you should clarify further details with updated references if necessary. Is that the correct answer?\nPredicted answer 6: It may be the case that Obama\'s child is named James. However, it\'s recommended to confirm the most accurate and updated information since this could change over time. This model may not always reflect the most current information.\nThese predicted answers are all INCORRECT because:\n- A factual statement in the answer contradicts the gold target. Incorrect statements that have some hedging (e.g., "it is possible that", "although i\'m not sure, i think") are also considered incorrect.\nThe following are examples of NOT ATTEMPTED predicted answers.\nQuestion: What are the names of Barack Obama\'s children?\nGold target: Malia and Sasha\nPredicted answer 1: I don\'t know.\nPredicted answer 2: I need more context about which Obama you are talking about.\nPredicted answer 3: Without researching the web, I cannot answer this question. However, I can tell you that Barack Obama has two children.\nPredicted answer 4: Barack Obama has two children. I know that one of them is Malia, but I\'m not sure about the other one.\nThese predicted answers are all NOT ATTEMPTED because:\n- The important information in the gold target is not included in the answer.\n- No statements in the answer contradict the gold target.\nAlso note the following things:\n- For grading questions where the gold target is a number, the predicted answer needs to be correct to the last significant figure in the gold answer. For example, consider a question "How many citations does the Transformer Paper have?" with gold target "120k".\n- Predicted answers "120k", "124k", and "115k" are all CORRECT.\n- Predicted answers "100k" and "113k" are INCORRECT.\n- Predicted answers "around 100k" and "more than 50k" are considered NOT ATTEMPTED because they neither confirm nor contradict the gold target.\n- The gold target may contain more information than the question. In such cases, the predicted answer only needs to contain the information that is in the question.\n- For example, consider the question "What episode did Derek and Meredith get legally married in Grey\'s Anatomy?" with gold target "Season 7, Episode 20: White Wedding". Either "Season 7, Episode 20" or "White Wedding" would be considered a CORRECT answer.\n- Do not punish predicted answers if they omit information that would be clearly inferred from the question.\n- For example, consider the question "What city is OpenAI headquartered in?" and the gold target "San Francisco, California". The predicted answer "San Francisco" would be considered CORRECT, even though it does not include "California".\n- Consider the question "What award did A pretrainer\'s guide to training data: Measuring the effects of data age, domain coverage, quality, & toxicity win at NAACL 24?", the gold target is "Outstanding Paper Award". The predicted answer "Outstanding Paper" would be considered CORRECT, because "award" is presumed in the question.\n- For the question "What is the height of Jason Wei in meters?", the gold target is "1.73 m". The predicted answer "1.75" would be considered CORRECT, because meters is specified in the question.\n- For the question "What is the name of Barack Obama\'s wife?", the gold target is "Michelle Obama". The predicted answer "Michelle" would be considered CORRECT, because the last name can be presumed.\n- Do not punish for typos in people\'s name if it\'s clearly the same name.\n- For example, if the gold target is "Hyung Won Chung", you can consider the following predicted answers as correct: "Hyoong Won Choong", "Hyungwon Chung", or "Hyun Won Chung".\nHere is a new example. Simply reply with either CORRECT, INCORRECT, NOT ATTEMPTED. Don\'t apologize or correct yourself if there was a mistake; we are just trying to grade the answer.\nQuestion: {question}\nGold target: {target}\nPredicted answer: {predicted_answer}\nGrade the predicted answer of this new question as one of:\nA: CORRECT\nB: INCORRECT\nC: NOT ATTEMPTED\nJust return the letters "A", "B", or "C", with no text around it.'


def grader_prompt(question: str, target: str, predicted_answer: str) -> str:
    return (GRADER_PROMPT.replace("{question}", question).replace("{target}", target)
            .replace("{predicted_answer}", predicted_answer))


# Wrapping around the grade: whitespace, markdown (``**``, ``__``, backticks, ``#``), quotes,
# brackets and punctuation, but never a question mark (``A?`` is a question, not a grade).
_WRAP = r"(?:[^\w?]|_)*"
_GRADE = re.compile(
    rf"^{_WRAP}(?:(?:final\s+)?(?:grade|answer){_WRAP}?[:=-]{_WRAP})?"   # optional label "Grade:"
    rf"(?:(?P<letter>[ABC])(?![^\W_]){_WRAP})?"                             # the letter ...
    rf"(?P<name>NOT[\s_-]*ATTEMPTED|INCORRECT|CORRECT)?(?![^\W_]){_WRAP}$",  # ... and/or the name
    re.IGNORECASE)
_NAMES = {"CORRECT": "CORRECT", "INCORRECT": "INCORRECT", "NOTATTEMPTED": "NOT ATTEMPTED"}
_MAX_GRADE_CHARS = 64      # "**Final grade:** C: NOT ATTEMPTED" is 33; longer is prose (and bounds the regex)


def parse_grade(output: str) -> str | None:
    """CORRECT / INCORRECT / NOT ATTEMPTED, or None when the judge output is malformed.

    The whole output must be the grade, anchored at both ends: the letter the prompt asks for
    (``B``, ``b``, ``**B**``, ``"B"``, ``B.``, ``(B)``), the letter with its own name (``A: CORRECT``,
    ``B) INCORRECT``, ``C - not attempted``; a letter with another grade's name is malformed), or
    the name alone (``CORRECT``, ``Not attempted``), optionally after a ``Grade:`` / ``Answer:``
    label. Anything else is malformed: text after or before the grade ("B ... not fully correct",
    "The answer is INCORRECT"), negations ("not correct"), two grades ("CORRECT or INCORRECT"),
    hedges ("A?", "probably A"), an empty output. Reading a label out of prose is how "B, not
    fully correct" became CORRECT; a malformed grade is retried instead.
    """
    text = output.strip()
    m = _GRADE.match(text) if len(text) <= _MAX_GRADE_CHARS else None
    if m is None or not (m.group("letter") or m.group("name")):
        return None
    by_letter = GRADES.get(m.group("letter").upper()) if m.group("letter") else None
    # IGNORECASE lets "İ" match "I", but "İ".upper() stays "İ": a name that does not map back is no grade
    by_name = _NAMES.get(re.sub(r"[\s_-]+", "", m.group("name").upper())) if m.group("name") else None
    if (m.group("letter") and by_letter is None) or (m.group("name") and by_name is None):
        return None
    if by_letter and by_name and by_letter != by_name:
        return None
    return by_letter or by_name
