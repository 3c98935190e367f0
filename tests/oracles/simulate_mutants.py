"""Deliberate bugs in gpudra's simulator, and whether the artifact comparison catches them.

    python tests/oracles/simulate_mutants.py [NAME …]

Each mutant is one textual change to gpudra/simulate (every occurrence of a text), applied to a copy of the package in a temporary
directory (the work tree is never touched); tests/simulate/test_simulate_artifact.py's gpudra-against-artifact tests then
run on the copy and the mutant is KILLED when one of them fails, MISSED otherwise. Not collected by pytest: it is
the evidence that the recorded placements pin FGD's rounding, the tie orders and the popularity cut.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# name -> (file under gpudra/simulate, text, replacement, what it breaks)
MUTANTS = {
    "fgd-round": ("fgd.py", "int(sigmoid((before - after) / 1000) * MAX_NODE_SCORE)",
                  "round(sigmoid((before - after) / 1000) * MAX_NODE_SCORE)",
                  "FGD's score rounded instead of truncated (both branches)"),
    "node-tie-order": ("policies.py", "return min(tied, key=self.context.node_rank.__getitem__)",
                       "return max(tied, key=self.context.node_rank.__getitem__)",
                       "ties among the best nodes go to the highest rank, not the lowest"),
    "bestfit-gpu-tie": ("policies.py", "(best < 0 or left < res.gpu_left[best])",
                        "(best < 0 or left <= res.gpu_left[best])",
                        "a share goes to the last of the equally full GPUs"),
    "fgd-gpu-tie": ("fgd.py", "if best_gpu < 0 or score > best_score:", "if best_gpu < 0 or score >= best_score:",
                    "FGD puts a share on the last of its best-scored GPUs"),
    "cut-90": ("fgd.py", "POPULARITY_THRESHOLD = 95 ", "POPULARITY_THRESHOLD = 90 ",
               "typical tasks cover 90% instead of 95%"),
    "cut-99": ("fgd.py", "POPULARITY_THRESHOLD = 95 ", "POPULARITY_THRESHOLD = 99 ",
               "typical tasks cover 99% instead of 95%"),
    "cut-past-boundary": ("fgd.py", "if covered >= expected:", "if covered > expected:",
                          "the cut takes one more shape when the popular ones cover exactly 95%"),
    "cut-order": ("fgd.py", '"|".join(item[0][3])), reverse=True)', '"|".join(item[0][3])), reverse=False)',
                  "shapes of equal count: the smaller first"),
    "packing-order": ("policies.py", "key=lambda i: res.gpu_left[i])  # stable: fullest first",
                      "key=lambda i: -res.gpu_left[i])",
                      "GpuPacking looks at the emptiest GPUs first"),
    "fgd-sum-order": ("fgd.py", "if total_left and not self.cpu_aware:", "if total_left and False:",
                      "F_n summed as Σ p·F(m) + (1 − Σ p_fit)·free, not per kind in the artifact's order"),
    "whole-gpus-last": ("fgd.py", "    for index, left in enumerate(res.gpu_left):\n        if len(chosen) >= count:",
                        "    for index, left in reversed(list(enumerate(res.gpu_left))):\n"
                        "        if len(chosen) >= count:",
                        "whole GPUs taken from the last free index down"),
}


def run(name: str) -> bool:
    """True when the mutant is killed."""
    file, text, replacement, _ = MUTANTS[name]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "gpudra", Path(tmp) / "gpudra", ignore=shutil.ignore_patterns("__pycache__"))
        path = Path(tmp) / "gpudra" / "simulate" / file
        source = path.read_text()
        if text not in source:
            raise SystemExit(f"{name}: {text!r} is not in {file}; update the mutant")
        path.write_text(source.replace(text, replacement))
        env = dict(os.environ, PYTHONPATH=tmp)
        done = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_simulate_artifact.py"),
                               "-q", "-p", "no:cacheprovider", "-n", "0", "-k", "gpudra_places"],
                              cwd=tmp, env=env, capture_output=True, text=True)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        print(f"{name:<20}{'KILLED' if done.returncode else 'MISSED':<8}{last}", flush=True)
        return done.returncode != 0


def main() -> int:
    names = sys.argv[1:] or list(MUTANTS)
    missed = [name for name in names if not run(name)]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
