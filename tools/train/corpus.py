"""The training text: the King James Version of the Bible as Debian's bible-kjv-text ships it.

The `bible` program (Debian package bible-kjv, which pulls in bible-kjv-text) prints every verse;
this module turns its output into plain text, one chapter per paragraph block:

    Genesis 1
    In the beginning God created the heaven and the earth.
    And the earth was without form, ...

(a heading line, then one verse per line without its number, then a blank line). Chapters whose
index (0-based, in book order) is congruent to TEST_PHASE modulo TEST_EVERY form the held-out test
split; the training never reads them. The text is public domain (the translation dates from
1611; see /usr/share/doc/bible-kjv-text/copyright).
"""

import hashlib
import subprocess

# The whole text as `bible -l2000 gen1:1-rev22:21` prints it (bible-kjv 4.38, Debian 12).
BIBLE_OUTPUT_SHA256 = "6f74f5589333c56c263963e6347dba662bae2d96861302e690aaae0b4a855eda"
TEST_EVERY = 20
TEST_PHASE = 19


def bible_output():
    """The raw output of the `bible` program over the whole text (str)."""
    raw = subprocess.run(["bible", "-l2000", "gen1:1-rev22:21"], check=True, capture_output=True).stdout
    return raw.decode("ascii")


def chapters(raw):
    """[(heading, [verse text, ...])] in book order."""
    out = []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        if line.startswith("  "):
            number, _, text = line.strip().partition(" ")
            if not number.isdigit() or not out:
                raise ValueError(f"unexpected verse line {line!r}")
            out[-1][1].append(text.strip())
        else:
            out.append((line.strip(), []))
    return out


def chapter_text(chapter):
    heading, verses = chapter
    return heading + "\n" + "\n".join(verses) + "\n\n"


def splits(check_hash=True):
    """(train text, test text): every chapter in one of the two, in book order."""
    raw = bible_output()
    digest = hashlib.sha256(raw.encode("ascii")).hexdigest()
    if check_hash and digest != BIBLE_OUTPUT_SHA256:
        raise SystemExit(f"bible output sha256 {digest} != pinned {BIBLE_OUTPUT_SHA256}: another "
                         "bible-kjv-text version? (pass --no-check-corpus to train on it anyway)")
    train, test = [], []
    for i, c in enumerate(chapters(raw)):
        (test if i % TEST_EVERY == TEST_PHASE else train).append(chapter_text(c))
    return "".join(train), "".join(test)


if __name__ == "__main__":
    raw = bible_output()
    print("sha256", hashlib.sha256(raw.encode("ascii")).hexdigest(), "bytes", len(raw))
    tr, te = splits(check_hash=False)
    print("train bytes", len(tr), "test bytes", len(te), "chapters", len(chapters(raw)))
