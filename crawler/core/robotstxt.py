"""robots.txt rules: parse a file into groups and match a URL against them (RFC 9309).

Pure and bounded: parsing is one pass over the lines; matching a pattern against a path is
O(len(pattern) * len(path)) (the positions algorithm of Google's reference matcher, written
here anew), so a hostile file cannot make it backtrack. Conforms to every standard case of
Google's robots.txt conformance suite (tests/data/robots_cases.json). Where RFC 9309 asks for
more than the suite does, the caller (``crawler.core.robots.RobotsPolicy``) adds it; see
docs/ROBOTS.md.

Decisions, with their source:
- lines end at CR, LF or CRLF; ``#`` starts a comment (RFC 9309 2.2, 2.2.3);
- directive names are case-insensitive (2.1);
- a group is one or more consecutive user-agent lines followed by rules; rules before any
  user-agent line are ignored; other records (sitemap, unknown) do not end a group (2.1);
- groups naming the same agent are combined (2.2.1);
- an agent line's value is matched by its product token, the leading ``[A-Za-z_-]`` run,
  case-insensitively and whole: ``barbarbot-prod`` names ``barbarbot-prod``, ``AB42bot`` names
  ``AB`` (2.2.1; Google's ``ExtractUserAgent`` does the same);
- ``*`` (alone or followed by white space) is the global group, used only when no group names
  the agent (2.2.1);
- the longest matching pattern, counted in octets after percent-encoding, wins; on a tie
  ``allow`` wins (2.2.2); an empty pattern matches nothing;
- non-ASCII octets in patterns are percent-encoded and escapes are upper-cased before
  comparison (2.2.2);
- ``*`` matches any run of characters and a final ``$`` anchors the end (2.2.3);
- a byte-order mark (or a prefix of one) before the first line is skipped; anywhere else it is
  part of the line, which then is not a directive.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_AGENT_TOKEN = re.compile(r"[A-Za-z_-]*")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# The UTF-8 byte-order mark as text (U+FEFF), and what a cut-off one decodes to.
_BOMS = ("\ufeff", "\ufffd")


@dataclass(frozen=True, slots=True)
class Rule:
    """One allow or disallow line of a group; ``pattern`` is percent-encoded."""

    allow: bool
    pattern: str


@dataclass(eq=False, slots=True)
class Group:
    """The rules that apply to the agents a group names (all combined)."""

    rules: list[Rule] = field(default_factory=list)
    crawl_delay: str | None = None


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """A parsed robots.txt: the groups by lower-cased product token, and the global group."""

    groups: dict[str, Group]
    global_group: Group | None

    def group_for(self, agent: str) -> Group | None:
        """The group ``agent`` (a product token) obeys; None means no rules apply to it."""
        return self.groups.get(agent.lower(), self.global_group)

    def allowed(self, agent: str, url: str) -> bool:
        """Whether ``url`` (already percent-encoded, as the suite requires) may be fetched."""
        group = self.group_for(agent)
        if group is None:
            return True
        return decide(group.rules, url_path(url))


def escape_pattern(pattern: str) -> str:
    """Percent-encode octets outside US-ASCII and upper-case existing escapes (RFC 9309 2.2.2)."""
    out = []
    for char in pattern:
        if ord(char) < 0x80:
            out.append(char)
        else:
            out.extend(f"%{octet:02X}" for octet in char.encode("utf-8", "surrogatepass"))
    return _ESCAPE.sub(lambda m: "%" + m.group(1).upper(), "".join(out))


def _split_line(line: str) -> tuple[str, str] | None:
    """(lower-cased key, value) of a directive line, or None for a blank or comment line."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    key, colon, value = line.partition(":")
    if not colon:
        # Google's matcher accepts "disallow /"; RFC 9309 requires the colon. Accept the
        # space-separated form too: the writer's intent is plain and nothing else is meant.
        key, _, value = line.partition(" ")
        if not value:
            return None
    return key.strip().lower(), value.strip()


def parse(text: str) -> RobotsRules:
    """Parse a robots.txt; never raises (lines that are not directives are skipped)."""
    if text[:1] in _BOMS:
        text = text[1:]
    groups: dict[str, Group] = {}
    global_group: Group | None = None
    current: list[Group] = []  # the groups the lines being read add to
    in_agents = False  # the previous directive was a user-agent line
    for line in _LINE_BREAK.split(text):
        parsed = _split_line(line)
        if parsed is None:
            continue
        key, value = parsed
        if key == "user-agent":
            if not in_agents:
                current = []
                in_agents = True
            if value.startswith("*") and (len(value) == 1 or value[1].isspace()):
                if global_group is None:
                    global_group = Group()
                group = global_group
            else:
                token = _AGENT_TOKEN.match(value)
                name = token.group(0).lower() if token else ""
                if not name:
                    continue
                group = groups.setdefault(name, Group())
            if group not in current:  # identity: Group has eq=False
                current.append(group)
        elif key in ("allow", "disallow"):
            in_agents = False
            if value:
                rule = Rule(allow=key == "allow", pattern=escape_pattern(value))
                for group in current:
                    group.rules.append(rule)
        elif key == "crawl-delay":
            for group in current:
                if group.crawl_delay is None:
                    group.crawl_delay = value
    return RobotsRules(groups=groups, global_group=global_group)


def url_path(url: str) -> str:
    """The path, parameters and query of ``url`` (no fragment), "/" when it has none; ``url``
    may be absolute, scheme-less ("example.com/a") or a path, as the suite feeds them."""
    start = 2 if url.startswith("//") else 0
    scheme_end = url.find("://", start)
    first_delimiter = _find_any(url, "/?;", start)
    if scheme_end >= 0 and (first_delimiter < 0 or scheme_end < first_delimiter):
        start = scheme_end + 3
    path_start = _find_any(url, "/?;", start)
    if path_start < 0:
        return "/"
    fragment = url.find("#", start)
    if 0 <= fragment < path_start:
        return "/"
    path = url[path_start:] if fragment < 0 else url[path_start:fragment]
    return path if path.startswith("/") else "/" + path


def _find_any(text: str, chars: str, start: int) -> int:
    positions = [p for p in (text.find(c, start) for c in chars) if p >= 0]
    return min(positions) if positions else -1


def matches(pattern: str, path: str) -> bool:
    """Whether ``pattern`` (with ``*`` and a final ``$``, RFC 9309 2.2.3) matches a prefix of
    ``path``, keeping the set of path positions the pattern so far can end at."""
    positions = [0]
    last = len(pattern) - 1
    for index, char in enumerate(pattern):
        if char == "$" and index == last:
            return positions[-1] == len(path)
        if char == "*":
            positions = list(range(positions[0], len(path) + 1))
            continue
        positions = [p + 1 for p in positions if p < len(path) and path[p] == char]
        if not positions:
            return False
    return True


def decide(rules: list[Rule], path: str) -> bool:
    """The longest matching rule decides; allow wins a tie; no match allows (RFC 9309 2.2.2)."""
    best_length = -1
    allowed = True
    for rule in rules:
        length = len(rule.pattern)
        if length < best_length or (length == best_length and allowed):
            continue
        if matches(rule.pattern, path):
            if length > best_length or rule.allow:
                allowed = rule.allow
            best_length = length
    return allowed


def crawl_delay_seconds(group: Group | None) -> float | None:
    """The group's Crawl-delay if it is a finite non-negative number (not in RFC 9309)."""
    if group is None or group.crawl_delay is None:
        return None
    try:
        delay = float(group.crawl_delay)
    except ValueError:
        return None
    return delay if delay >= 0 and math.isfinite(delay) else None
