"""Quality-gate benchmark: the demo ingest job with and without its ``expectations:``.

Runs ``spark-submit.sh jobs/ingest.py`` (a fresh spark-submit each time, as ``make demo`` does)
on the demo config, once with the config's expectations and once without them, interleaved
for several rounds, each into a fresh namespace. Prints per variant the median job time
(``job_seconds``), the median gate time (``details.expectations_s``), the gate's share of the
job, the part of the gate that computed the input into the cache the write then reads
(``details.expectations_input_s``: without a gate the write pays it) and the share of the rest,
and the marginal cost of the gate (median job with it minus median job without it, and its share
of the job with it).

``--checkout DIR`` (repeatable) runs the same rounds with the lancepart of other checkouts too
(e.g. the main branch), so before/after figures come from one run on one machine.

    python benchmarks/quality_gate.py [--rounds 3] [--config configs/demo.yaml] [--checkout /path/to/other]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from machine_info import machine

HERE = Path(__file__).resolve().parent.parent


def run_job(checkout: Path, config: dict, work: Path, name: str) -> dict:
    """One spark-submit of ``checkout``'s ingest job on ``config``; its JSON summary."""
    root = work / name
    cfg = {**config, "namespace": {**config["namespace"], "root": str(root)}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(checkout), "LANCEPART_PYTHON": sys.executable}
    proc = subprocess.run([str(checkout / "spark-submit.sh"), str(checkout / "jobs" / "ingest.py"),
                           "--config", str(path)], cwd=work, env=env, capture_output=True, text=True, check=False)
    shutil.rmtree(root, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: job failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--config", default=str(HERE / "configs" / "demo.yaml"))
    ap.add_argument("--checkout", action="append", default=[], help="another lancepart checkout to run as well")
    args = ap.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    if not config.get("expectations"):
        raise SystemExit(f"{args.config} has no expectations: nothing to measure")
    config.pop("batch_id", None)  # every run publishes
    without = {k: v for k, v in config.items() if k != "expectations"}
    checkouts = [HERE, *(Path(c).resolve() for c in args.checkout)]
    print(json.dumps({"machine": machine("pyspark", "great_expectations", "lance", "pyarrow"),
                      "load_avg_1m_at_start": round(os.getloadavg()[0], 2), "config": args.config,
                      "rows": config.get("source", {}).get("rows"), "expectations": len(config["expectations"]),
                      "rounds": args.rounds, "checkouts": [str(c) for c in checkouts]}, indent=2))
    work = Path(tempfile.mkdtemp(prefix="lancepart-bench-gate-"))
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        for r in range(args.rounds):
            for c in checkouts:
                for variant, cfg in (("gate", config), ("no_gate", without)):
                    summary = run_job(c, cfg, work, f"r{r}-{c.name}-{variant}")
                    runs.setdefault((str(c), variant), []).append(summary)
                    print(f"round {r} {c} {variant}: job {summary['job_seconds']} s, gate "
                          f"{summary['details'].get('expectations_s', '-')} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\ncheckout | job with gate (median s) | gate s | gate share | of it computing the input s "
          "| gate proper share | job without gate s | gate marginal s | marginal share")
    for c in checkouts:
        with_gate, no_gate = runs[(str(c), "gate")], runs[(str(c), "no_gate")]
        job = statistics.median(s["job_seconds"] for s in with_gate)
        gate = statistics.median(s["details"]["expectations_s"] for s in with_gate)
        share = statistics.median(s["details"]["expectations_s"] / s["job_seconds"] for s in with_gate)
        # the count that computes the input into the cache the write reads: without a gate the write
        # pays it (older checkouts do not report it: '-')
        inputs = [s["details"]["expectations_input_s"] for s in with_gate if "expectations_input_s" in s["details"]]
        proper = [(s["details"]["expectations_s"] - s["details"]["expectations_input_s"]) / s["job_seconds"]
                  for s in with_gate if "expectations_input_s" in s["details"]]
        base = statistics.median(s["job_seconds"] for s in no_gate)
        print(f"{c} | {job:.2f} | {gate:.2f} | {share:.0%} | "
              f"{f'{statistics.median(inputs):.2f}' if inputs else '-'} | "
              f"{f'{statistics.median(proper):.0%}' if proper else '-'} | {base:.2f} | {job - base:+.2f} | "
              f"{(job - base) / job:+.0%}")
    print(f"load_avg_1m_at_end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
