"""Page text of the demo web: a deterministic function of (site, path, version).

A real change (version + 1) rewrites the headline and three quarters of the paragraphs, each
paragraph with its own topic (its own frequent words), so a 64-bit simhash over word tokens
moves far past the crawler's 6-bit threshold (11 to 34 bits). A cosmetic change only touches a
short status line (a build number, or a "rendered at" time and a visit counter): 0 to 5 bits.
No I/O, no clock: the caller passes every time-dependent value.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

VOCABULARY_SIZE = 3000
# Word frequencies follow a Zipf law with this exponent, like natural text (each paragraph
# has its own topic, i.e. its own frequent words: see ``words``).
_ZIPF_EXPONENT = 1.0
# Paragraphs fall into this many groups; a real change rewrites all groups but one.
_GROUPS = 4
_SYLLABLES = (
    *(consonant + vowel for consonant in "bdfgklmnprstvz" for vowel in "aeiou"),
    *["an", "en", "in", "on", "ar", "er", "or", "al", "el", "il"],
)


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """VOCABULARY_SIZE distinct pseudo-words, the same on every run."""
    rng = random.Random("demo-vocabulary")
    words: dict[str, None] = {}
    while len(words) < VOCABULARY_SIZE:
        words["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))] = None
    return tuple(words)


@lru_cache(maxsize=1)
def _cumulative_weights() -> tuple[float, ...]:
    return tuple(
        itertools.accumulate(1.0 / rank**_ZIPF_EXPONENT for rank in range(1, VOCABULARY_SIZE + 1))
    )


def words(seed: str, count: int, topic: int = 0) -> list[str]:
    """``count`` Zipf-distributed vocabulary words, deterministic from ``seed``.

    ``topic`` rotates which words are the common ones, as a text's subject decides its
    frequent words: without it every version would share the same frequent words, and their
    counts would pin most simhash bits however much of the text changed.
    """
    return _draw_words(random.Random(seed), count, topic)


def _draw_words(rng: random.Random, count: int, topic: int) -> list[str]:
    vocab = vocabulary()
    ranks = rng.choices(range(VOCABULARY_SIZE), cum_weights=_cumulative_weights(), k=count)
    return [vocab[(rank + topic) % VOCABULARY_SIZE] for rank in ranks]


def sentence_text(seed: str, count: int, topic: int = 0) -> str:
    return " ".join(words(seed, count, topic)).capitalize()


@lru_cache(maxsize=32768)
def _paragraph(seed: str) -> str:
    """4 to 8 sentences of 6 to 16 words on one topic (one RNG draw for all the words)."""
    rng = random.Random(seed)
    topic = rng.randrange(VOCABULARY_SIZE)
    lengths = [rng.randint(6, 16) for _ in range(rng.randint(4, 8))]
    paragraph_words = iter(_draw_words(rng, sum(lengths), topic))
    sentences = [" ".join(itertools.islice(paragraph_words, n)).capitalize() for n in lengths]
    return ". ".join(sentences) + "."


@dataclass(frozen=True)
class PageLayout:
    """What stays fixed across a page's versions: how many paragraphs, and which half each
    belongs to (a real change rewrites one half, the next change the other)."""

    paragraph_count: int
    group_of_paragraph: tuple[int, ...]

    @staticmethod
    def for_page(page_seed: str) -> PageLayout:
        rng = random.Random(f"layout:{page_seed}")
        count = rng.randint(16, 36)  # about 8 to 19 KB of HTML
        groups = [1 + i % _GROUPS for i in range(count)]
        rng.shuffle(groups)
        return PageLayout(count, tuple(groups))

    def paragraph_generation(self, index: int, version: int) -> int:
        """How many times paragraph ``index`` was rewritten by the first ``version`` changes:
        change j (1-based) rewrites every paragraph except those of group ``j mod 4``."""
        group = self.group_of_paragraph[index]
        spared = (version - group) // _GROUPS + 1 if version >= group else 0
        return version - spared


def page_title(page_seed: str) -> str:
    """A page's title: fixed for its whole life."""
    return sentence_text(f"title:{page_seed}", 4)


def content_etag(page_seed: str, version: int, cosmetic_version: int) -> str:
    """A strong entity tag of what the page serves (per-request text aside)."""
    digest = hashlib.sha256(f"{page_seed}\0{version}\0{cosmetic_version}".encode()).hexdigest()
    return f'"{digest[:24]}"'


@dataclass(frozen=True)
class RenderedLink:
    href: str
    text: str


def render_page(
    *,
    page_seed: str,
    site_name: str,
    version: int,
    cosmetic_version: int,
    links: Sequence[RenderedLink],
    per_request_note: str | None = None,
) -> str:
    """The HTML of one version of a page.

    ``links`` appear in this order in the document (inside ``<nav>``), which is the order
    ``bfs_window`` uses to break ties. ``per_request_note`` is cosmetic text that the server
    renders on each request (a time and a counter).
    """
    layout = PageLayout.for_page(page_seed)
    title = page_title(page_seed)
    headline = sentence_text(f"headline:{page_seed}:{version}", 7)
    paragraphs = [
        _paragraph(f"p:{page_seed}:{i}:{layout.paragraph_generation(i, version)}")
        for i in range(layout.paragraph_count)
    ]
    nav = "\n".join(
        f'    <li><a href="{html.escape(link.href, quote=True)}">{html.escape(link.text)}</a></li>'
        for link in links
    )
    body = "\n".join(f"  <p>{html.escape(p)}</p>" for p in paragraphs)
    status = f"Build {cosmetic_version}."
    if per_request_note:
        status += " " + per_request_note
    # The script and style carry words the crawler must not count as visible text.
    script_words = " ".join(words(f"script:{page_seed}:{version}", 20))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: serif; max-width: 40em; }} /* {html.escape(site_name)} theme */
nav li {{ display: inline; margin-right: 1em; }}
</style>
<script>
var pageState = {{"version": {version}, "words": "{script_words}"}};
function trackVisit() {{ return pageState.version + 1; }}
</script>
</head>
<body>
<header><p class="site">{html.escape(site_name)}</p></header>
<nav>
  <ul>
{nav}
  </ul>
</nav>
<main>
  <h1>{html.escape(title)}</h1>
  <h2>{html.escape(headline)}</h2>
{body}
</main>
<footer><p class="status">{html.escape(status)}</p></footer>
</body>
</html>
"""
