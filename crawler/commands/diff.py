"""``crawler diff URL [--from TIME] [--to TIME] [--words]``: unified diff of two versions'
visible text.

The default compares the last two versions that differed: the newest version detected as a
change (simhash distance at or above the threshold, or any change of the text for a URL
watched exactly) and the version stored before it.

A first line states the simhash distance between the two versions. Every line that differs is
shown, numbers included, however few bits the simhash moved; ``--words`` shows the words that
differ instead, each place with a few words of context. When the two texts are the same, one
line says so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crawler.commands.collection_args import add_url_command, store_root, stored_versions
from crawler.commands.options import TIME_FORMS, parse_time, plain
from crawler.core.fingerprint import hamming_distance
from crawler.core.textdiff import page_text, unified_diff, word_changes
from crawler.errors import DAMAGED
from crawler.store.base import RESPONSE
from crawler.store.damage import RecordDamaged
from crawler.store.index import load_body, payload_version, version_at


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    add_url_command(subparsers, "diff", help="Diff the visible text of two versions.",
                    description=plain(__doc__), run=run, arguments=_arguments)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_time", type=parse_time, default=None,
                        metavar="TIME", help=f"The older version: current at TIME ({TIME_FORMS}).")
    parser.add_argument("--to", dest="to_time", type=parse_time, default=None, metavar="TIME",
                        help="The newer version: current at TIME (default: the latest).")
    parser.add_argument("--words", action="store_true",
                        help="Show the words that differ (marked [-removed-]{+added+}, with "
                             "context), not whole lines.")


def run(args: argparse.Namespace) -> int:
    url, stored, region = stored_versions(args)
    pages = [v for v in stored if v.status is not None and v.status < 400]
    if args.from_time is None and args.to_time is None:
        responses = [v for v in pages if v.record_type == RESPONSE]
        changed = [i for i, v in enumerate(responses) if v.changed and i > 0]
        if changed:
            old, new = responses[changed[-1] - 1], responses[changed[-1]]
        elif len(responses) >= 2:
            old, new = responses[-2], responses[-1]
        else:
            print(f"{url}: fewer than two stored versions to compare", file=sys.stderr)
            return 1
    else:
        new_at = version_at(pages, args.to_time)
        old_at = version_at(pages, args.from_time) if args.from_time else None
        # A time before the first version names none: say so, as `get --at` does, rather
        # than quietly comparing other versions than the ones asked for.
        for option, when, found in (("--from", args.from_time, old_at),
                                    ("--to", args.to_time, new_at)):
            if when is not None and found is None:
                print(f"no stored version of {url} at {when.isoformat()} ({option})",
                      file=sys.stderr)
                return 1
        if old_at is None and new_at is not None:
            earlier = [v for v in pages if v.fetched_at < new_at.fetched_at]
            old_at = earlier[-1] if earlier else None
        if old_at is None or new_at is None:
            print(f"{url}: no stored version at one of the times", file=sys.stderr)
            return 1
        old, new = payload_version(stored, old_at), payload_version(stored, new_at)
    root = store_root(args)
    try:
        old_body, new_body = load_body(root, stored, old), load_body(root, stored, new)
    except RecordDamaged as exc:
        print(f"crawler diff: {url}: {exc.message}", file=sys.stderr)
        return DAMAGED
    except (OSError, LookupError, ValueError) as exc:
        print(f"crawler diff: {exc}", file=sys.stderr)
        return 1
    old_text, old_simhash = page_text(old_body.payload, old_body.content_type, region)
    new_text, new_simhash = page_text(new_body.payload, new_body.content_type, region)
    old_label = f"{url} @ {old.fetched_at.isoformat()}"
    new_label = f"{url} @ {new.fetched_at.isoformat()}"
    distance = (
        "simhash distance n/a (not HTML)" if old_simhash is None or new_simhash is None
        else f"simhash distance {hamming_distance(old_simhash, new_simhash)} bits"
    )
    if old_text == new_text:
        # Said in one line, so that an empty output never stands for "no difference".
        same = "identical" if old_body.payload == new_body.payload else (
            "identical (the bytes differ)")
        print(f"{url}: visible text {same} at {old.fetched_at.isoformat()} and "
              f"{new.fetched_at.isoformat()}; {distance}")
        return 0
    print(f"{url}: {distance}")
    if args.words:
        changes, _ = word_changes(old_text, new_text)
        print("\n".join([f"--- {old_label}", f"+++ {new_label}",
                         *(change.shown() for change in changes)]))
    else:
        print("\n".join(unified_diff(old_text, new_text, old_label, new_label)))
    return 0
