"""Fuzz harness: router-trace JSONL as the routing analyses read it (scripts/moe_routing/; docs/router_trace.md),
with atheris (libFuzzer for Python; docs/fuzzing.md).

The input is written as router_trace_rank0.jsonl of a scratch directory, and the analyses run on it as
their command lines do (concentration.py --phase all, with and without --decode-only; load.py --phase all
--after-drop; the arguments parsed once), their printed output discarded. The contract: each returns, or raises one of the errors
the analyses' run_main reports as `strata: error: ...` (OSError, ValueError, KeyError, RuntimeError,
ImportError); any other exception (TypeError, IndexError, MemoryError, ...) is a finding. And the fast
path of the reader agrees with json.loads: for every line that is a JSON object, trace.parse_line
returns what trace._slow (json.loads, then numpy) returns.

    python tests/fuzz/fuzz_router_trace.py [LIBFUZZER_FLAGS] [CORPUS_DIRS]   (scripts/fuzz.sh runs it)

Reference: Megatron-LM megatron/core/transformer/moe/router_trace.py (the schema),
tools/moe_routing/analyze_routing_concentration.py, https://github.com/google/atheris.
"""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile

import atheris

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(root, 'scripts'))

import numpy as np  # noqa: E402  (numpy and the standard library are not instrumented)

with atheris.instrument_imports(include=['moe_routing']):
    from moe_routing import concentration, load, trace


def _uninstrumented(module, name):
    """`name` of a second, uninstrumented copy of `module`'s file."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('uninstrumented_' + module.__name__, module.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return getattr(copy, name)


# The fast path's numpy array comparisons, instrumented, leak memory in atheris 3.0.0 (each input's
# compared arrays stay referenced: 5 KB an input, 2 GB in 800,000), so that one function runs
# uninstrumented; it is straight-line numpy, and its fallback decisions stay instrumented in parse_line.
trace._parse_ids = _uninstrumented(trace, '_parse_ids')

REPORTED = (OSError, ValueError, KeyError, RuntimeError, ImportError)
scratch = tempfile.mkdtemp(prefix='strata_fuzz_trace_', dir='/dev/shm' if os.path.isdir('/dev/shm') else None)


# The analyses' command lines, parsed once (run(args) is main(argv) after its argument parsing).
RUNS = ((concentration, concentration.parse_args([scratch, '--phase', 'all'])),
        (concentration, concentration.parse_args([scratch, '--phase', 'all', '--decode-only'])),
        (load, load.parse_args([scratch, '--phase', 'all', '--after-drop'])))


class ContractBroken(Exception):
    pass


def same_parse(line):
    """parse_line(line) equals _slow(line) when json.loads reads the line as an object."""
    try:
        rec = json.loads(line)
    except ValueError:
        return
    if not isinstance(rec, dict):
        return
    try:
        want = trace._slow(line)
    except REPORTED:
        return
    got = trace.parse_line(line)
    if got[0] != want[0] or (got[1] is None) != (want[1] is None) or (
            got[1] is not None and not np.array_equal(got[1], want[1])):
        raise ContractBroken('parse_line and json.loads differ on %r:\n%r\n%r' % (line, got, want))


def test_one_input(data):
    path = os.path.join(scratch, 'router_trace_rank0.jsonl')
    with open(path, 'wb') as f:
        f.write(data)
    for line in data.split(b'\n'):
        if line.strip():
            same_parse(line)
    for script, args in RUNS:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                script.run(args)
        except REPORTED:
            pass


def max_len():
    """This harness's max_len in tests/fuzz/harnesses.txt (the one list of harnesses and limits)."""
    for line in open(os.path.join(root, 'tests', 'fuzz', 'harnesses.txt')):
        fields = line.split()
        if fields[:2] == ['router_trace', 'python']:
            return int(fields[2])
    raise SystemExit('tests/fuzz/harnesses.txt has no python line router_trace')


def main():
    # The defaults come first: a flag on the command line overrides them (as in tests/fuzz/fuzz_contract.h).
    # -timeout=2: the analyses start numpy and argparse per input, slower than the C++ harnesses' 1 s.
    defaults = ['-max_len=%d' % max_len(), '-rss_limit_mb=2048', '-timeout=2',
                '-dict=' + os.path.join(root, 'tests', 'fuzz', 'dict', 'router_trace.dict')]
    atheris.Setup([sys.argv[0]] + defaults + sys.argv[1:], test_one_input)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    main()
