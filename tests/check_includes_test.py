#!/usr/bin/python3
"""Fixture test of scripts/check_includes.py (ctest include_order_fixture): the checker passes
on tests/fixtures/include_order/clean (the config including a subsystem's *_section file), fails
on bad/ (an upward include parallel -> models, a sibling include data -> parallel, a models/layers
file including models/blocks above it, and a section file including the config above it) with the expected messages, honours an --allow baseline, and
reports stale and malformed baseline lines.
Usage: check_includes_test.py REPO_ROOT
"""
import os
import subprocess
import sys

ORDER = "(order: core < kernels < parallel, data < models < sweep < training < apps)"
MODELS_ORDER = "(order: config < layers < blocks < (root: shell) < gpt, hybrid)"
TRAINING_ORDER = ("(order: *_section files < config < optimizer < checkpointing, planning, observability < hf, "
                  "inference < (root: run, trainer) < golden)")


def run(root, *args):
    script = os.path.join(root, "scripts", "check_includes.py")
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def expect(cond, what, out):
    if not cond:
        print(f"FAIL: {what}\n--- output ---\n{out}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    root = os.path.abspath(sys.argv[1])
    fx = os.path.join(root, "tests", "fixtures", "include_order")
    rc, out, err = run(root, "--root", os.path.join(fx, "clean"))
    expect(rc == 0 and "check_includes: ok" in out, "clean tree passes", out + err)

    rc, out, err = run(root, "--root", os.path.join(fx, "bad"))
    want = [f"data/reader.h:4: folder data includes parallel {ORDER}",
            f"models/layers/attention.h:3: folder models/layers includes models/blocks {MODELS_ORDER}",
            f"parallel/comm.h:5: folder parallel includes models {ORDER}",
            f"training/optimizer/bad_section.h:2: folder training/*_section includes training/config {TRAINING_ORDER}"]
    expect(rc == 1 and out.splitlines() == want, "bad tree fails with the four violations", out + err)

    rc, out, err = run(root, "--root", os.path.join(fx, "bad"), "--allow", os.path.join(fx, "bad_allowed.txt"))
    expect(rc == 0 and "4 allowed by the baseline" in out, "baseline allows the listed pairs", out + err)

    stale = os.path.join(fx, "stale_allowed.txt")
    rc, out, err = run(root, "--root", os.path.join(fx, "bad"), "--allow", stale)
    expect(rc == 1 and out.strip() == f"{stale}:3: stale entry `models/gpt.h -> training/trainer.h`: that include "
           "no longer occurs; delete the line", "a stale baseline entry fails", out + err)

    bad_list = os.path.join(fx, "malformed_allowed.txt")
    rc, out, err = run(root, "--root", os.path.join(fx, "clean"), "--allow", bad_list)
    expect(rc == 2 and err.startswith("strata: error: ") and "expected `file -> include`" in err,
           "a malformed baseline line is an error", out + err)


if __name__ == "__main__":
    main()
