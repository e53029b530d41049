#!/usr/bin/python3
"""Include-order check: every `#include "folder/..."` in the source tree must respect the
folder order of docs/architecture.md ("Folder order").

    core < kernels < parallel, data < models < sweep < training < apps

Rule: a file in folder X may include a header of X itself or of any folder strictly below X.
parallel and data are siblings (the same level): neither may include the other. tests/ and
scripts/ may include anything (they are not checked). Sub-folders count as their top folder
(kernels/cpu and kernels/cuda are kernels; core/cuda and core/formats are core; models/layers is
models; apps/strata is apps). A source folder including tests/ or scripts/ is a violation too.
Includes whose first path component is not one of these folders (bare "sweep.h", third-party
"nlohmann/json.hpp") are not checked.

Inside training/ the subsystems have an order of their own (TRAINING_ORDER_TEXT below): a file in
training/X may include training/Y only when Y is below X. Inside models/ likewise (MODELS_ORDER_TEXT:
config < layers < blocks < the root's shell < gpt, hybrid). A subsystem's config section file
(training/X/NAME_section.h or .cpp: the section's struct and field table, beside its owner) sits
below training/config, which gathers the sections into StrataConfig: it may include other section
files and folders below training/ only, and any training/ file may include it. A bare include that resolves to a header
under tests/ (a source folder reaching into test code) is a violation too.

Each violation is printed as
    file:line: folder X includes Y (order: core < kernels < parallel, data < models < training < apps)
and the exit status is 1 when there is any.

--allow FILE: a baseline of known violations, one `file -> include` pair a line (`#` comments),
e.g. `models/gpt_model.h -> training/config/config.h`. Listed pairs are not reported; a listed pair that
no longer occurs is reported as stale (exit 1), so the list shrinks as the violations are fixed.

Usage: check_includes.py [--root DIR] [--allow FILE]     (DIR: the repository root, default .)
"""
import argparse
import glob
import os
import re
import sys

ORDER_TEXT = "core < kernels < parallel, data < models < sweep < training < apps"
# Inside training/: its subsystems, each a folder (docs/architecture.md "training/"). The run and
# the training loop are the folder's root; golden/ runs training, so it sits above the root.
# A subsystem's *_section files (its config section) sit below config, as SECTION.
TRAINING_ORDER_TEXT = ("*_section files < config < optimizer < checkpointing, planning, observability < hf, "
                       "inference < (root: run, trainer) < golden")
SECTION = "*_section"
TRAINING_LEVELS = {SECTION: -1, "config": 0, "optimizer": 1, "checkpointing": 2, "planning": 2, "observability": 2,
                   "hf": 3, "inference": 3, "": 4, "golden": 5}
# Inside models/: the model section's config (and the layer-kind registry, the hybrid pattern)
# at the bottom, then the layers, the blocks (stacks) that hold them, the shell at the folder's
# root (the language-model interface, the shell, the manifest), and the models on top.
MODELS_ORDER_TEXT = "config < layers < blocks < (root: shell) < gpt, hybrid"
MODELS_LEVELS = {"config": 0, "layers": 1, "blocks": 2, "": 3, "gpt": 4, "hybrid": 4}
# Level of each checked folder; equal levels are siblings (no includes between them).
LEVELS = {"core": 0, "kernels": 1, "parallel": 2, "data": 2, "models": 3, "sweep": 3.5, "training": 4, "apps": 5}
# Folders above every source folder: they may include anything and nothing may include them.
UNCHECKED = {"tests": 6, "scripts": 6}
SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def may_include(src, dst):
    """True when a file in folder `src` may include a header of folder `dst`."""
    if src == dst:
        return True
    return (UNCHECKED.get(dst, LEVELS.get(dst, -1))) < LEVELS[src]


def source_files(root):
    for folder in sorted(LEVELS):
        base = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXTENSIONS):
                    path = os.path.join(dirpath, name)
                    yield folder, os.path.relpath(path, root).replace(os.sep, "/")


def includes_of(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if m:
                yield lineno, m.group(1)


# The folders whose sub-folders have an order of their own: {top folder: {sub-folder: level}}.
SUBFOLDER_LEVELS = {"training": TRAINING_LEVELS, "models": MODELS_LEVELS}
SUBFOLDER_ORDER_TEXT = {"training": TRAINING_ORDER_TEXT, "models": MODELS_ORDER_TEXT}


def subfolder_part(path, top):
    """The sub-folder of `top` a path lies in ("" for the folder's root; SECTION for a training
    config section file), or None when the path is not under `top`."""
    parts = path.split("/")
    if parts[0] != top:
        return None
    if top == "training" and os.path.splitext(parts[-1])[0].endswith("_section"):
        return SECTION
    return parts[1] if len(parts) > 2 else ""


def subfolder_violation(rel, inc):
    """The top folder when a file of training/ or models/ includes a header of its own top folder
    from a sub-folder not below its own; else None."""
    top = rel.split("/", 1)[0]
    levels = SUBFOLDER_LEVELS.get(top)
    if levels is None:
        return None
    src, dst = subfolder_part(rel, top), subfolder_part(inc, top)
    if dst is None or src == dst:
        return None
    if src not in levels or dst not in levels:
        return top  # a sub-folder without a place in the order
    return top if levels[dst] >= levels[src] else None


def resolves_into_tests(root, rel, inc):
    """A bare include ("sweep.h") that the build resolves to a header under tests/."""
    if os.path.exists(os.path.join(root, os.path.dirname(rel), inc)):
        return False
    return bool(glob.glob(os.path.join(root, "tests", "**", inc), recursive=True))


def find_violations(root):
    """[(file, line, folder, included folder, include path)] in file order."""
    out = []
    for folder, rel in source_files(root):
        for lineno, inc in includes_of(root, rel):
            if "/" not in inc:
                if resolves_into_tests(root, rel, inc):
                    out.append((rel, lineno, folder, "tests", inc))
                continue
            top = subfolder_violation(rel, inc)
            if top:
                out.append((rel, lineno, top + "/" + (subfolder_part(rel, top) or "(root)"), inc.rsplit("/", 1)[0], inc))
                continue
            target = inc.split("/", 1)[0]
            if target not in LEVELS and target not in UNCHECKED:
                continue  # a third-party or relative include
            if not may_include(folder, target):
                out.append((rel, lineno, folder, target, inc))
    return out


def read_allowed(path):
    """{(file, include): line number in the baseline}."""
    allowed = {}
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [p.strip() for p in line.split("->")]
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"{path}:{lineno}: expected `file -> include`, got {raw.strip()!r}")
            allowed[(parts[0], parts[1])] = lineno
    return allowed


def main(argv):
    ap = argparse.ArgumentParser(description="Check #include lines against the folder order " + ORDER_TEXT)
    ap.add_argument("--root", default=".", help="repository root (default: .)")
    ap.add_argument("--allow", help="baseline file of allowed `file -> include` pairs")
    args = ap.parse_args(argv)
    try:
        allowed = read_allowed(args.allow) if args.allow else {}
    except (OSError, ValueError) as e:
        print(f"strata: error: {e}", file=sys.stderr)
        return 2
    failures = 0
    seen = set()
    for rel, lineno, folder, target, inc in find_violations(args.root):
        if (rel, inc) in allowed:
            seen.add((rel, inc))
            continue
        order = SUBFOLDER_ORDER_TEXT.get(folder.split("/", 1)[0], ORDER_TEXT) if "/" in folder else ORDER_TEXT
        print(f"{rel}:{lineno}: folder {folder} includes {target} (order: {order})")
        failures += 1
    for (rel, inc), lineno in sorted(allowed.items(), key=lambda kv: kv[1]):
        if (rel, inc) not in seen:
            print(f"{args.allow}:{lineno}: stale entry `{rel} -> {inc}`: that include no longer occurs; "
                  "delete the line")
            failures += 1
    if failures:
        print(f"check_includes: {failures} problem(s)", file=sys.stderr)
        return 1
    print(f"check_includes: ok ({len(seen)} allowed by the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
