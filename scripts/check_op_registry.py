#!/usr/bin/python3
"""Op registry check (ggml's test-backend-ops habit): every public op declared in kernels/<op>.h
must be covered by a case of the op sweep (sweep/), so that no kernel lands without its
CUDA-vs-CPU comparison.

Public ops: the functions declared directly in `namespace strata::kernels` (not in its cpu::,
cuda:: or helper namespaces) of an op header — a kernels/*.h that declares backend twins in a
`namespace cpu` or `namespace cuda` block, or through STRATA_BACKEND_OP (kernels/backend_op.h) —
that take a Tensor argument. Helpers without tensors
(rotary_dim, norm_rows_per_chunk, attention_softmax_scale) are thereby not ops; NOT_OPS lists the
few tensor-taking helpers that are not ops either.

Sweep registry: `strata_op_sweep --list` prints one line per case, tab-separated: name, dtypes,
the registering file, the covered kernels:: functions (STRATA_SWEEP_OP's covers string).

Fails (exit 1), printing one line each, when
  - a public op is covered by no sweep case:   kernels/x.h: op foo_forward has no op sweep case ...
  - a case covers a name that is no public op:  sweep case 'x' covers unknown op 'foo' ...
  - a case claims an op its file never calls:   sweep case 'x' (tests/sweep/f.cpp) covers 'foo' ...
    (the name must occur as an identifier in that file outside comments and string literals).

Usage: check_op_registry.py [--root DIR] (--sweep BINARY | --list-file FILE)
"""
import argparse
import os
import re
import subprocess
import sys

# Tensor-taking functions of op headers that are not ops (argument checks shared by backends).
NOT_OPS = {"gemm_dims"}
KERNELS_NS = "strata::kernels"


def strip_comments_and_strings(text):
    """C++ text with comments removed and string/char literals emptied (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def top_level_statements(text):
    """(namespace path, statement) for each statement or definition head, at namespace scope."""
    stack, buf, paren = [], [], 0  # stack entries: namespace name, or None for any other block
    pending_ns = None
    for c in text:
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        if paren > 0 or c not in "{};":
            if all(s is not None for s in stack):
                buf.append(c)
            continue
        in_ns = all(s is not None for s in stack)
        stmt = "".join(buf).strip() if in_ns else ""
        if c == "{":
            m = re.match(r"^(?:inline\s+)?namespace\s+([\w:]+)$", stmt)
            stack.append(m.group(1) if m else None)
            if in_ns and not m and stmt:
                yield "::".join(stack[:-1]), stmt  # a definition head: `int f(int x)`
        elif c == "}":
            if stack:
                stack.pop()
        elif in_ns and stmt:
            yield "::".join(stack), stmt
        buf = []


def public_ops(root):
    """{function name: header path relative to root} of the op headers' public ops."""
    ops = {}
    kdir = os.path.join(root, "kernels")
    for name in sorted(os.listdir(kdir)):
        if not name.endswith(".h"):
            continue
        rel = "kernels/" + name
        with open(os.path.join(kdir, name), encoding="utf-8") as f:
            text = strip_comments_and_strings(f.read())
        text = re.sub(r"(?m)^\s*#.*$", "", text)  # preprocessor lines
        # STRATA_BACKEND_OP(name) (kernels/backend_op.h) declares an op's cpu:: and cuda:: twins.
        macro_twins = re.findall(r"(?m)^\s*STRATA_BACKEND_OP\((\w+)\)\s*$", text)
        text = re.sub(r"(?m)^\s*STRATA_BACKEND_OP\(\w+\)\s*$", "", text)
        stmts = list(top_level_statements(text))
        if not macro_twins and not any(ns in (KERNELS_NS + "::cpu", KERNELS_NS + "::cuda") for ns, _ in stmts):
            continue  # not an op header (dispatch.h, backend_op.h, *_math.h)
        for ns, stmt in stmts:
            if ns != KERNELS_NS:
                continue
            m = re.match(r"^(?:[\w:<>,\s\*&]+?)\b(\w+)\s*\((.*)\)[\s\w]*$", stmt, re.S)
            if not m or re.match(r"^(using|typedef|struct|class|enum|template|static_assert)\b", stmt):
                continue
            fn, params = m.group(1), m.group(2)
            if re.search(r"\bTensor\b", params) and fn not in NOT_OPS:
                ops.setdefault(fn, rel)
    return ops


def read_registry(args):
    if args.list_file:
        with open(args.list_file, encoding="utf-8") as f:
            text = f.read()
    else:
        p = subprocess.run([args.sweep, "--list"], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{args.sweep} --list exited {p.returncode}: {p.stderr.strip()}")
        text = p.stdout
    cases = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise RuntimeError(f"sweep --list line {lineno}: expected 4 tab-separated fields: {line!r}")
        cases.append((parts[0], parts[2], parts[3].split()))
    return cases


def resolve(root, path):
    """The registering file: as given when it exists, else sweep/<basename> (tests/sweep/ in the
    fixtures) under root."""
    if os.path.isabs(path) and os.path.exists(path):
        return path
    for cand in (os.path.join(root, path), os.path.join(root, "sweep", os.path.basename(path)),
                 os.path.join(root, "tests", "sweep", os.path.basename(path))):
        if os.path.exists(cand):
            return cand
    return None


def check(root, ops, cases):
    problems, covered, sources = [], set(), {}
    for name, path, names in cases:
        src = resolve(root, path)
        if src is not None and src not in sources:
            with open(src, encoding="utf-8") as f:
                sources[src] = strip_comments_and_strings(f.read())
        shown = os.path.relpath(src, root) if src else path
        for fn in names:
            if fn not in ops:
                problems.append(f"sweep case '{name}' ({shown}) covers unknown op '{fn}' "
                                "(not a public op of kernels/*.h)")
                continue
            covered.add(fn)
            if src is None:
                problems.append(f"sweep case '{name}': cannot find its file {path}")
            elif not re.search(r"\b" + re.escape(fn) + r"\b", sources[src]):
                problems.append(f"sweep case '{name}' ({shown}) covers '{fn}' but never calls it")
    for fn, header in sorted(ops.items(), key=lambda kv: (kv[1], kv[0])):
        if fn not in covered:
            problems.append(f"{header}: op {fn} has no op sweep case (add it to a STRATA_SWEEP_OP covers "
                            "list in sweep/sweep_<op>.cpp, comparing the target against the f64 CPU)")
    return problems


def main(argv):
    ap = argparse.ArgumentParser(description="Check that every public kernels:: op has an op sweep case")
    ap.add_argument("--root", default=".", help="repository root (default: .)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--sweep", help="the strata_op_sweep binary (its --list output is read)")
    src.add_argument("--list-file", help="a saved `strata_op_sweep --list` output")
    args = ap.parse_args(argv)
    try:
        ops = public_ops(args.root)
        cases = read_registry(args)
    except (OSError, RuntimeError) as e:
        print(f"strata: error: {e}", file=sys.stderr)
        return 2
    problems = check(args.root, ops, cases)
    for p in problems:
        print(p)
    if problems:
        print(f"check_op_registry: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_op_registry: ok ({len(ops)} public ops, all covered by {len(cases)} sweep cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
