"""One line per kernel from a ptxas -v log: short name, registers, stack and spill bytes.

    python tools/ptxas_report.py build.log
"""

import re
import subprocess
import sys


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        return out.stdout.splitlines()
    except OSError:
        return names


def short(name: str) -> str:
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*", "", name)  # drop the parameter list
    name = re.sub(r"\bfp8gemm::(detail::)?", "", name)
    return name.replace("(int)", "").replace("(bool)", "").replace("__nv_bfloat16", "bf16")


def main(path: str) -> None:
    # The stack/spill line follows "Function properties for NAME": the entry's own, and also those
    # of any device function it calls (a lambda ptxas did not inline): only the entry's counts.
    rows, current, own = [], None, False
    for line in open(path, errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = {"name": m.group(1)}
            rows.append(current)
        elif current is not None:
            if m := re.search(r"Function properties for (\S+)", line):
                own = m.group(1) == current["name"]
            if own and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
                current["stack"], current["spill"] = int(m.group(1)), int(m.group(2)) + int(m.group(3))
            if m := re.search(r"Used (\d+) registers", line):
                current["regs"] = int(m.group(1))
    seen = set()
    for row, name in zip(rows, demangle([r["name"] for r in rows])):
        key = (name, row.get("regs"))
        if key in seen:
            continue
        seen.add(key)
        print(f"  {short(name)[:110]:110s} regs {row.get('regs', '?'):>3}  stack {row.get('stack', '?')}"
              f"  spill {row.get('spill', '?')}")


if __name__ == "__main__":
    main(sys.argv[1])
