"""Turning measured cases into a table (stdout), JSON and a PNG plot."""

from __future__ import annotations

import json
import os


def _fmt(v) -> str:
    return f"{v:8.1f}" if isinstance(v, float) else "     n/a"


def _best_peer(row):
    """The fastest result that is not one of ours ("ours unfused", "ours, ... only": ours too)."""
    peers = {k: v for k, v in row["results"].items()
             if k != row["ours"] and not k.startswith("ours") and isinstance(v, float)}
    return max(peers.items(), key=lambda kv: kv[1]) if peers else (None, None)


def row_line(row) -> str:
    ours = row["results"].get(row["ours"])
    name, best = _best_peer(row)
    ratio = f"{ours / best:5.2f}x {name}" if isinstance(ours, float) and best else "-"
    return f"{row['suite']:9s} {row['case']:28s} ours {_fmt(ours)} {row['metric']}  vs best peer {ratio}"


def table(rows, device: str) -> str:
    out = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        srows = [r for r in rows if r["suite"] == suite]
        impls = list(dict.fromkeys(k for r in srows for k in r["results"]))
        metric = srows[0]["metric"]
        out.append(f"## {suite} ({metric}, {device})")
        out.append("| case | " + " | ".join(impls) + " | ours / best peer |")
        out.append("|---" * (len(impls) + 2) + "|")
        for r in srows:
            cells = [_fmt(r["results"].get(i)).strip() for i in impls]
            ours = r["results"].get(r["ours"])
            name, best = _best_peer(r)
            ratio = f"{ours / best:.2f}x ({name})" if isinstance(ours, float) and best else "-"
            out.append(f"| {r['case']} | " + " | ".join(cells) + f" | {ratio} |")
        notes = {f"{i}: {v}" for r in srows for i, v in r["results"].items() if isinstance(v, str)}
        out.extend(f"- {n}" for n in sorted(notes))
        out.append("")
    return "\n".join(out)


def write(rows, out_dir: str, device: str, timing: str) -> None:
    """results.json (the rows, the device and how they were timed) and results.png."""
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"device": device, "timing": timing, "rows": rows}, f, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    fig, axes = plt.subplots(len(suites), 1, figsize=(14, 4.5 * len(suites)), squeeze=False)
    for ax, suite in zip(axes[:, 0], suites):
        srows = [r for r in rows if r["suite"] == suite]
        impls = list(dict.fromkeys(k for r in srows for k in r["results"]))
        width = 0.8 / len(impls)
        for j, impl in enumerate(impls):
            vals = [r["results"].get(impl) for r in srows]
            vals = [v if isinstance(v, float) else 0.0 for v in vals]
            ax.bar([i + j * width for i in range(len(srows))], vals, width, label=impl)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(srows))])
        ax.set_xticklabels([r["case"] for r in srows], rotation=20, fontsize=8)
        ax.set_ylabel(srows[0]["metric"])
        ax.set_title(f"{suite} on {device} ({timing})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "results.png"), dpi=110)
