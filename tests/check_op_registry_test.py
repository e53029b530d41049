#!/usr/bin/python3
"""Fixture test of scripts/check_op_registry.py (ctest op_registry_fixture) on
tests/fixtures/op_registry/: a fixture op header (kernels/foo.h: foo_forward, foo_backward and
helpers that are not ops) and sweep files, with saved `strata_op_sweep --list` outputs. The check
passes when every op is covered, and fails naming the op with no case, a covered name that is no
op, and a case that claims an op its file never calls.
Usage: check_op_registry_test.py REPO_ROOT
"""
import os
import subprocess
import sys


def run(root, list_name):
    fx = os.path.join(root, "tests", "fixtures", "op_registry")
    script = os.path.join(root, "scripts", "check_op_registry.py")
    p = subprocess.run([sys.executable, script, "--root", fx, "--list-file", os.path.join(fx, list_name)],
                       capture_output=True, text=True)
    return p.returncode, p.stdout.splitlines(), p.stderr


def expect(cond, what, out):
    if not cond:
        print(f"FAIL: {what}\n--- output ---\n{out}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    root = os.path.abspath(sys.argv[1])
    missing = ("kernels/foo.h: op foo_backward has no op sweep case (add it to a STRATA_SWEEP_OP covers list "
               "in sweep/sweep_<op>.cpp, comparing the target against the f64 CPU)")
    rc, out, err = run(root, "list_ok.txt")
    expect(rc == 0 and out == ["check_op_registry: ok (2 public ops, all covered by 3 sweep cases)"],
           "every op covered: passes (helpers, cpu:: twins and *_math.h are not ops)", out)
    rc, out, err = run(root, "list_missing.txt")
    expect(rc == 1 and out == [missing], "an op without a sweep case fails, naming it and its header", out)
    rc, out, err = run(root, "list_claims.txt")
    expect(rc == 1 and out == ["sweep case 'foo' (tests/sweep/sweep_foo.cpp) covers 'foo_backward' but never "
                               "calls it"], "a case claiming an op its file never calls fails", out)
    rc, out, err = run(root, "list_unknown.txt")
    expect(rc == 1 and out == ["sweep case 'foo' (tests/sweep/sweep_foo.cpp) covers unknown op 'foo_fwd' "
                               "(not a public op of kernels/*.h)", missing], "an unknown covered name fails", out)
    rc, out, err = run(root, "list_malformed.txt")
    expect(rc == 2 and err.startswith("strata: error: sweep --list line 1"), "malformed --list output", err)


if __name__ == "__main__":
    main()
