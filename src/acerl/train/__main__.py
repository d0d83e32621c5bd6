"""``python -m acerl.train --config FILE --model M --method X --seed S --root DIR``: train one run locally.

Exit codes: 0 when the final policy exists, 75 (:data:`acerl.train.PREEMPTED_EXIT_CODE`) after a
SIGTERM / SIGUSR1 checkpoint (rerun the same command to resume), 2 for a config error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from acerl.config import ConfigError, Run, load_config
from acerl.train.loop import train_run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acerl.train", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config", action="append", required=True, metavar="FILE", help="config file (repeatable)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key"
    )
    parser.add_argument("--model", required=True, help="model key (models.<key>)")
    parser.add_argument("--method", required=True, help="method key (methods.<key>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, default=Path("."), help="work directory (data/, models/, runs/)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--reference", choices=["initial", "ema"], default=None, help="reference policy")
    parser.add_argument("--ref-ema-decay", type=float, default=None, help="EMA decay for --reference ema")
    parser.add_argument(
        "--old-logprobs", choices=["recompute", "rollout"], default=None, help="source of log pi_old"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config, args.set)
        final = train_run(
            cfg,
            Run(args.model, args.method, args.seed),
            args.root,
            device=args.device,
            threads=args.threads,
            progress=not args.no_progress,
            reference=args.reference,
            ref_ema_decay=args.ref_ema_decay,
            old_logprobs=args.old_logprobs,
        )
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
