#!/usr/bin/env python3
"""Every command-line argument of Megatron-LM's training parser, as a TSV data file.

Reference: Megatron-LM megatron/training/arguments.py, add_megatron_arguments() (the parser that
parse_args() builds), including the flags that ArgumentGroupFactory
(megatron/training/argument_utils.py) generates from the config dataclasses, plus
megatron/post_training/arguments.py add_modelopt_args() (the extra_args_provider of the
post-training entry points, whose flags the modelopt example model files use).

It exports the tree of --commit from the bare git dir --megatron-git into a temp dir, imports
that Megatron and calls add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False)), then
writes one line per argparse action (-h/--help skipped), sorted by first flag:
    flags  dest  arity  default  choices  group
arity: switch (takes no value), one (one value), optional (nargs='?'), list (nargs '*', '+', N>1).
Prints the number of actions and of '--' spellings.

Needs a Python whose torch Megatron can import (torch 2.x; Debian's torch 1.13 is too old), e.g.
    python3.12 -m venv /tmp/mvenv && /tmp/mvenv/bin/pip install torch numpy packaging
No stubs are needed: transformer_engine, apex etc. are optional imports upstream (it only warns).

Usage: extract_args.py --megatron-git DIR [--commit REV] [--out FILE]
"""
import argparse
import enum
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "training", "config", "megatron_arguments.tsv")


def git(git_dir, *args):
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True,
                          capture_output=True).stdout


def export_tree(git_dir, commit, dest):
    tar = git(git_dir, "archive", "--format=tar", commit)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        if sys.version_info >= (3, 12):
            t.extractall(dest, filter="data")
        else:
            t.extractall(dest)


def text(value):
    """Short repr-ish text of a default or a choice: strings bare, enums by name."""
    if isinstance(value, enum.Enum):
        s = value.name
    elif isinstance(value, str):
        s = value
    else:
        s = repr(value)
    s = s.replace("\t", " ").replace("\n", " ")
    return s if len(s) <= 60 else s[:57] + "..."


def arity(action):
    n = action.nargs
    if n == 0:
        return "switch"  # store_true/false/const, count, help, version, BooleanOptionalAction
    if n is None or n == 1:
        return "one"
    if n == "?":
        return "optional"
    return "list"  # '*', '+', N > 1, REMAINDER


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron-git", required=True, help="Megatron-LM git dir (bare is fine)")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--out", default=DEFAULT_OUT)
    opts = ap.parse_args()

    sha = git(opts.megatron_git, "rev-parse", opts.commit + "^{commit}").decode().strip()
    date = git(opts.megatron_git, "show", "-s", "--format=%cs", sha).decode().strip()

    with tempfile.TemporaryDirectory(prefix="megatron-") as tree:
        export_tree(opts.megatron_git, sha, tree)
        sys.path.insert(0, tree)
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed" etc.
        from megatron.training.arguments import add_megatron_arguments
        from megatron.post_training.arguments import add_modelopt_args
        parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
        # The post-training (ModelOpt) entry points pass it as their extra_args_provider, and
        # examples/post_training/modelopt/conf's model files use its flags.
        add_modelopt_args(parser)

    default_groups = {id(parser._positionals), id(parser._optionals)}
    group_of = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            group_of[id(action)] = "" if id(group) in default_groups else (group.title or "").lower()

    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flags = [s for s in action.option_strings if s.startswith("--")]
        if not flags:
            sys.exit(f"action without a '--' flag: {action.option_strings or action.dest}")
        choices = ",".join(text(c) for c in action.choices) if action.choices is not None else ""
        rows.append((",".join(flags), action.dest, arity(action), text(action.default),
                     choices, group_of.get(id(action), "")))
    rows.sort(key=lambda r: r[0].split(",")[0])

    with open(opts.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("# Megatron-LM training arguments: megatron/training/arguments.py "
                "add_megatron_arguments (incl. ArgumentGroupFactory-generated flags) "
                "and megatron/post_training/arguments.py add_modelopt_args\n")
        f.write(f"# megatron-lm commit {sha} ({date})\n")
        f.write("# generated by scripts/megatron/extract_args.py; do not edit\n")
        f.write("flags\tdest\tarity\tdefault\tchoices\tgroup\n")
        for row in rows:
            f.write("\t".join(row) + "\n")

    spellings = sum(len(r[0].split(",")) for r in rows)
    print(f"{len(rows)} actions, {spellings} '--' spellings -> {opts.out}")


if __name__ == "__main__":
    main()
