"""``python -m crawler.demo --sites 5 --pages 20 --port 8700``: serve the demo web until
Ctrl-C, printing the origins and page URLs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from crawler.demo.sites import SiteSpec, demo_sites, evolving_site, static_site
from crawler.demo.web import DemoWeb


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m crawler.demo", description=__doc__)
    parser.add_argument("--sites", type=int, default=5, help="number of changing sites")
    parser.add_argument("--pages", type=int, default=20, help="pages per changing site")
    parser.add_argument("--port", type=int, default=8700, help="shared port (0: pick one)")
    parser.add_argument("--host-base", type=int, default=2, help="first site is 127.0.0.N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mean-change-seconds", type=float, default=30.0, help="mean page change interval"
    )
    parser.add_argument("--static", action="store_true", help="add a 300-page static site")
    parser.add_argument("--evolving", action="store_true", help="add an evolving site")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    sites: list[SiteSpec] = demo_sites(args.sites, args.pages, args.seed, args.mean_change_seconds)
    if args.static:
        sites.append(static_site(seed=args.seed))
    if args.evolving:
        sites.append(evolving_site(seed=args.seed, mean_change_seconds=args.mean_change_seconds))
    async with DemoWeb(sites, host_base=args.host_base, port=args.port) as demo:
        for site, origin in zip(sites, demo.origins, strict=True):
            print(f"{site.name}: {origin}  (truth: {origin}/__truth__)")
        for url in demo.urls():
            print(url)
        print("Serving; Ctrl-C to stop.", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(_parse_args(argv)))


if __name__ == "__main__":
    main()
