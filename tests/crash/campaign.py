"""Run one crash tier for a given time and count the crash states checked and failed.

  python -m tests.crash.campaign --tier t0|t2|t3|t4|t5|t6 --seconds N [--seed S]

Cases come from the same functions the pytest tiers use, seeded S, S+1, ...; every failure is
printed with the label that replays it (seed, crash site). Exit status 1 on any failure."""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import tempfile
import time

from tests.crash.corruption import T5_KINDS, t5_case
from tests.crash.repair import MODES as T6_MODES
from tests.crash.repair import ON_IMAGE, t6_case
from tests.crash.tiers import RECOVERY_SITES, T0_KINDS, T4_KINDS, WRITER_SITES, CaseResult, t0_case, t2_case, t4_case

ONCE_PER_RUN = ("abort.create", "abort.delete", "recovery.truncate")


def _site(rng: random.Random, name: str) -> str:
    return f"{name}:{1 if name in ONCE_PER_RUN else rng.choice((1, 2, 3, 5, 8, 13, 21))}"


def _t2(workdir: str, seed: int) -> CaseResult:
    rng = random.Random(seed)
    choice = rng.random()
    if choice < 0.3:
        return t2_case(workdir, seed)
    if choice < 0.8:
        return t2_case(workdir, seed, site=_site(rng, rng.choice(WRITER_SITES)))
    first = None if rng.random() < 0.5 else _site(rng, rng.choice(WRITER_SITES))
    return t2_case(workdir, seed, site=first, recovery_site=_site(rng, rng.choice(RECOVERY_SITES)))


def run(tier: str, seconds: float, seed: int) -> int:
    logging.disable(logging.WARNING)  # recovery's warnings are expected here
    checked = failed = unreached = 0
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix=f"crash-{tier}-") as workdir, \
            contextlib.ExitStack() as stack:
        image = None
        from tests.crash.ext4 import Ext4Image, t3_case, unavailable
        reason = unavailable() if tier in ("t3", "t6") else None
        if reason and tier == "t3":
            print(f"cannot run T3: {reason}")
            return 2
        if reason:
            print(f"T6 without power cuts: {reason}")
        elif tier in ("t3", "t6"):
            image = stack.enter_context(Ext4Image(workdir))
        while time.monotonic() < deadline:
            rng = random.Random(seed)
            try:
                if tier == "t0":
                    result = t0_case(workdir, seed, rng.choice(T0_KINDS), rng.random() < 0.5)
                elif tier == "t2":
                    result = _t2(workdir, seed)
                elif tier == "t3":
                    result = t3_case(image, workdir, seed)
                elif tier == "t6":
                    modes = T6_MODES if image else [m for m in T6_MODES if m not in ON_IMAGE]
                    result = t6_case(workdir, seed, modes[seed % len(modes)], image)
                elif tier == "t4":
                    result = t4_case(workdir, seed, rng.choice(T4_KINDS))
                else:
                    result = t5_case(workdir, seed, rng.choice(T5_KINDS))
            except Exception as exc:  # a case that blows up is a failed case, not the end
                result = CaseResult(f"{tier.upper()} seed={seed}", [f"raised {exc!r}"])
            checked += 1
            unreached += not result.reached
            if not result.ok:
                failed += 1
                print(f"FAIL {result}", flush=True)
            seed += 1
    print(f"tier {tier}: {checked} crash states checked ({unreached} where the crash site or "
          f"cut came before any effect), {failed} failed; next seed {seed}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", choices=("t0", "t2", "t3", "t4", "t5", "t6"), required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"crash campaign: tier {args.tier}, {args.seconds:g} s, first seed {seed}", flush=True)
    return run(args.tier, args.seconds, seed)


if __name__ == "__main__":
    sys.exit(main())
