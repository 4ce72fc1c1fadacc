"""The fault matrix of docs/RELIABILITY.md: every scenario of tests/reliability/scenarios.py
against bundled nodes and redis-server, through the proxy and with redis-py's cluster client,
each on a cluster in network namespaces of its own (needs root: ip, nft).

    python bench/reliability.py                    # the whole matrix, a table on stdout
    python bench/reliability.py --write-doc        # ... and the table into docs/RELIABILITY.md
    python bench/reliability.py --scenario short-cut --kind ours --mode proxy

Each run takes 30 to 90 s; the matrix of 70 runs about 80 minutes. With ``--json FILE
--resume`` the rows already in FILE are kept (only missing or failed runs are made again), so
an interrupted matrix goes on where it stopped, and ``--resume`` with every row done only
rewrites the table; ``--again SCENARIO`` runs that scenario's rows once more.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.netns import FaultUnavailable, NetnsUnavailable, Network  # noqa: E402
from tests.reliability.netcluster import KINDS  # noqa: E402
from tests.reliability.scenarios import FAULTS, MODES, Outcome, run_scenario  # noqa: E402

DOC = ROOT / "docs" / "RELIABILITY.md"
BEGIN = "<!-- fault-matrix:begin (bench/reliability.py --write-doc) -->"
END = "<!-- fault-matrix:end -->"
SUBNET = "10.77.0.0/24"
COLUMNS = [("scenario", "scenario"), ("kind", "nodes"), ("mode", "client"),
           ("lost", "acked writes lost"), ("stale", "stale reads"),
           ("never_written", "reads never written"), ("dual_windows", "dual-master windows"),
           ("dual_after_heal", "… after heal"), ("failover", "failover"),
           ("refused_after_s", "cut master refused writes after s"), ("refusal", "refused with"),
           ("accepted_until_s", "cut master's last accepted write s"),
           ("probe_timeouts", "probe timeouts"),
           ("recovery_s", "recovery s"), ("healthy_after_heal_s", "healthy after heal s"),
           ("errors", "client errors"), ("acknowledged", "acked ops"),
           ("not_linearizable", "non-linearizable keys"),
           ("slow_p50_ms", "victim's keys p50 ms"), ("others_p50_ms", "other keys p50 ms"),
           ("others_p99_ms", "other keys p99 ms"), ("ran_at", "run at (UTC)"),
           ("load", "load average")]
# scenarios about the proxy itself: the cluster client has no proxy to cut off or restart
NOT_APPLICABLE = "n/a"
KIND_NAMES = {"ours": "bundled", "real": "redis 7.0.15"}


def run_one(scenario: str, kind: str, mode: str) -> dict[str, object]:
    """One run's row, with when it ran and the machine's load average (1 min) before and
    after it: the figures of one run are only comparable with another's at a similar load."""
    ran_at = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_before = os.getloadavg()[0]
    row = _run(scenario, kind, mode).row()
    row["ran_at"] = ran_at
    row["load"] = f"{load_before:.0f}-{os.getloadavg()[0]:.0f}"
    return row


def _run(scenario: str, kind: str, mode: str) -> Outcome:
    try:
        net = Network(SUBNET)
    except NetnsUnavailable as exc:
        raise SystemExit(f"network namespaces are not allowed here: {exc}") from exc
    try:
        with tempfile.TemporaryDirectory(prefix="sg-reliab-") as d:
            out, _ = run_scenario(net, Path(d), FAULTS[scenario], kind, mode)
            return out
    except FaultUnavailable as exc:
        out = Outcome(scenario, kind, mode)
        out.notes.append(f"skipped: {exc}")
        return out
    except Exception as exc:  # one broken run is a row saying so, not the end of the matrix
        out = Outcome(scenario, kind, mode)
        out.notes.append(f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        return out
    finally:
        net.close()


def table(rows: list[dict[str, object]]) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [head, "|" + "---|" * len(COLUMNS)]
    for row in _with_not_applicable(rows):
        cells = []
        for key, _ in COLUMNS:
            value = row.get(key)
            if key == "kind":
                cells.append(KIND_NAMES.get(str(value), str(value)))
            elif isinstance(value, bool):
                cells.append("yes" if value else "no")
            else:
                cells.append("" if value is None else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _with_not_applicable(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The rows, each scenario followed by an "n/a" row per kind for each client it does
    not apply to."""
    out: list[dict[str, object]] = []
    for i, row in enumerate(rows):
        out.append(row)
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        if nxt is not None and (nxt["scenario"], nxt["kind"]) == (row["scenario"], row["kind"]):
            continue
        fault = FAULTS.get(str(row["scenario"]))
        for mode in MODES:
            if fault is not None and mode not in fault.modes:
                out.append({key: NOT_APPLICABLE for key, _ in COLUMNS}
                           | {"scenario": row["scenario"], "kind": row["kind"], "mode": mode})
    return out


def section(rows: list[dict[str, object]]) -> str:
    faults = "\n".join(f"- `{f.name}`: {f.describe}." for f in FAULTS.values())
    notes = "\n".join(f"- {r['scenario']} / {r['kind']} / {r['mode']}: {n}"
                      for r in rows for n in r.get("notes", []))  # type: ignore[attr-defined]
    return (f"{BEGIN}\n"
            "Produced by `python bench/reliability.py --write-doc` "
            f"({len(rows)} runs; table written {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} "
            "UTC).\n\n"
            f"{faults}\n\n{table(rows)}\n\n"
            "n/a: the scenario is about the proxy itself (cut off with a master, or "
            "restarted); a cluster client has no proxy to cut off or restart, so there is "
            "nothing to run.\n"
            + (f"\nNotes:\n{notes}\n" if notes else "") + f"{END}")


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    DOC.write_text(doc[:start] + text + doc[end:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", choices=sorted(FAULTS))
    ap.add_argument("--kind", action="append", choices=KINDS)
    ap.add_argument("--mode", action="append", choices=MODES)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here (after each run)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --json that did not fail; run the others")
    ap.add_argument("--again", action="append", choices=sorted(FAULTS), default=[],
                    help="with --resume: run this scenario's rows again even if they passed")
    ap.add_argument("--write-doc", action="store_true",
                    help="replace the table in docs/RELIABILITY.md (the whole matrix only)")
    args = ap.parse_args(argv)
    if args.write_doc and (args.scenario or args.kind or args.mode):
        ap.error("--write-doc runs the whole matrix")
    done: dict[tuple[object, ...], dict[str, object]] = {}
    if args.resume and args.json and args.json.exists():
        for row in json.loads(args.json.read_text()):
            if row["scenario"] in args.again:
                continue
            if not any(str(n).startswith("failed") for n in row["notes"]):
                done[(row["scenario"], row["kind"], row["mode"])] = row
    rows = []
    for scenario in args.scenario or list(FAULTS):
        for kind in args.kind or list(KINDS):
            for mode in args.mode or list(FAULTS[scenario].modes):
                row = done.get((scenario, kind, mode)) or run_one(scenario, kind, mode)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    if args.write_doc:
        write_doc(section(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
