"""Build everything a board needs from one spec: models, app, service, scripts, one archive.

Reads SPEC.yaml (checked against the spec's JSON Schema first: every problem is listed with its
line and column, and nothing is built while one remains), builds each model (convert, optimize,
FP16 with the spec's verify gates, compile, a golden recording), and writes OUT_DIR with the
bundle folder, a byte-reproducible .tar.gz of it (SOURCE_DATE_EPOCH, or the spec's), its sha256,
a copy of install.sh and build-log.json. Every stage's result is cached by the digest of its
inputs, options and tool versions: an unchanged rebuild reuses everything, and changing one
model's options rebuilds that model only. A failed gate exits 1 and says which model and why.
Before it signs, the build starts the bundle's app as its service would, on sim and cpu for a
few generated frames: an app that fails exits 2 naming the spec key at fault, nothing written.

Examples:
  edgefuse build examples/tiny-camera.yaml -o out/tiny
  edgefuse build spec.yaml -o out/release --sign keys/release.key.pem --build-number 42
  edgefuse build spec.yaml -o out/release --jobs 2
  edgefuse build spec.yaml --shard 1/3 --cache /shared/cache   # CI: one slice of the models
  edgefuse build spec.yaml -o out/release --cache /shared/cache # then assemble from the cache
  edgefuse build --schema > edgefuse-build.schema.json          # for editors
"""

from __future__ import annotations

import argparse
import json
import os

from edgefuse.bundle.builder import build
from edgefuse.bundle.spec_schema import SCHEMA
from edgefuse.errors import InputError, Ref


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", nargs="?", metavar="SPEC.yaml", help="the build spec")
    parser.add_argument("-o", "--output", metavar="OUT_DIR",
                        help="folder to write (must be new or empty, see --force)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="models built in parallel worker processes (default 1)")
    parser.add_argument("--no-cache", action="store_true",
                        help="rebuild every stage (the results still refresh the cache)")
    parser.add_argument("--cache", metavar="DIR",
                        help="cache folder (default: the spec's cache.dir, else "
                             "~/.cache/edgefuse/build)")
    parser.add_argument("--shard", metavar="K/N",
                        help="build only models i with i %% N == K-1 into the cache; a run "
                             "without --shard then assembles the bundle from it")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing OUT_DIR (atomically, once the new one is done)")
    parser.add_argument("--sign", metavar="KEY.pem",
                        help="sign MANIFEST.json with this Ed25519 private key (edgefuse keys "
                             "new); boards that trust its public key install only signed bundles")
    parser.add_argument("--build-number", type=int, metavar="N",
                        help="the monotonic build number boards compare to refuse downgrades "
                             "(default: the source date epoch)")
    parser.add_argument("--emit", action="append", choices=("k8s",), default=[],
                        help="also write OUT_DIR/k8s/: a Containerfile (aarch64, CANN base "
                             "image as a build argument) and a DaemonSet for K8s/KubeEdge")
    parser.add_argument("--no-progress", action="store_true",
                        help="no per-model progress lines on stderr")
    parser.add_argument("--schema", action="store_true",
                        help="print the spec's JSON Schema and exit")


def run(args: argparse.Namespace) -> int:
    if args.schema:
        print(json.dumps(SCHEMA, indent=2))
        return 0
    if args.spec is None:
        raise InputError("no SPEC.yaml given", hint="edgefuse build SPEC.yaml -o OUT_DIR",
                         reference=Ref.BAD_USAGE)
    outcome = build(args.spec, args.output, jobs=args.jobs, use_cache=not args.no_cache,
                    cache_dir=args.cache, shard=args.shard, force=args.force,
                    progress=not args.no_progress, sign_key=args.sign,
                    build_number=args.build_number, emit=tuple(args.emit))
    rebuilt = ", ".join(outcome.rebuilt) or "none (everything from the cache)"
    if outcome.archive is None:
        print(f"shard {args.shard}: {len(outcome.models)} model(s) in the cache; rebuilt: "
              f"{rebuilt} ({outcome.seconds:.1f} s)")
        return 0
    print(f"bundle:  {outcome.bundle_dir}")
    print(f"archive: {outcome.archive}")
    print(f"sha256:  {outcome.archive_sha256}")
    print(f"rebuilt: {rebuilt} ({outcome.seconds:.1f} s)")
    hook = os.path.join(str(outcome.bundle_dir), "minirc_install_hook.sh")
    print(f"board:   bash {outcome.output_dir / 'install.sh'} {outcome.archive}   "
          f"(card image: scripts/build-image.sh, or the card maker's hook {hook})")
    return 0
