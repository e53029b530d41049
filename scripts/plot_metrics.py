#!/usr/bin/python3
"""Plot logged metrics of one or more Strata runs against the iteration.

    scripts/plot_metrics.py RUN_DIR [RUN_DIR ...] [--metric NAME ...] [--source auto|jsonl|tensorboard]
                            [--output FILE] [--dump-json FILE]

A RUN_DIR is a run's output directory (holding metrics.jsonl and/or tensorboard/), a JSONL metrics
file, or a directory of TensorBoard event files. Without --metric the plot shows the train and
validation loss ("lm loss", "lm loss validation"); any logged metric can be named instead
("learning-rate", "grad-norm", "lm loss validation ppl" ...). A metric and its "<name> validation"
twin share one panel; every other metric gets its own. Several runs are drawn on the same panels.

Sources (training/observability/metrics_log.h): the JSONL file has one object per logged iteration
({"iteration": 10, "lm loss": ..., ...}) and one per evaluation ({"iteration": 100,
"lm loss validation": ...}); TensorBoard event files are TFRecord-framed Event protos
(core/formats/tfevents.h), parsed here directly: no tensorboard or protobuf package. When a run
was restarted in the same directory, points at or after the iteration it restarted from are
replaced by the new run's (as TensorBoard purges orphaned steps).

The default output is RUN_DIR/loss.png (the first RUN_DIR; metrics.png when --metric is given);
its path is printed. Needs matplotlib (python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

DEFAULT_METRICS = ["lm loss", "lm loss validation"]

# ---- TensorBoard event files ----------------------------------------------------------------

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(buf, pos):
    shift = value = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def proto_fields(buf):
    """Yields (field number, wire type, value) of a protobuf message; length-delimited values are bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield field, wire, value


def tensor_scalar(buf):
    """The value of a scalar TensorProto (dtype float/double): float_val, double_val or tensor_content."""
    dtype = 1
    for field, wire, value in proto_fields(buf):
        if field == 1 and wire == 0:
            dtype = value
        elif field == 5:  # float_val (packed or not)
            return struct.unpack("<f", value[:4])[0]
        elif field == 6:  # double_val
            return struct.unpack("<d", value[:8])[0]
        elif field == 4 and wire == 2:  # tensor_content
            return struct.unpack("<d" if dtype == 2 else "<f", value[:8 if dtype == 2 else 4])[0]
    return None


def summary_scalars(buf):
    """(tag, value) of every scalar in a Summary: Value{tag=1, simple_value=2, tensor=8}."""
    for field, wire, value in proto_fields(buf):
        if field != 1 or wire != 2:
            continue
        tag, number = None, None
        for f, w, v in proto_fields(value):
            if f == 1 and w == 2:
                tag = v.decode("utf-8")
            elif f == 2 and w == 5:
                number = struct.unpack("<f", v)[0]
            elif f == 8 and w == 2 and number is None:
                number = tensor_scalar(v)
        if tag is not None and number is not None:
            yield tag, number


def read_tfevents(path):
    """Yields (tag, step, value) of every scalar in one event file; checks the record CRCs."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("%s: truncated record header at byte %d" % (path, pos))
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked_crc(header) != header_crc:
            raise ValueError("%s: bad length CRC at byte %d" % (path, pos))
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or pos + 16 + length > len(data):
            raise ValueError("%s: truncated record at byte %d" % (path, pos))
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if masked_crc(body) != body_crc:
            raise ValueError("%s: bad data CRC at byte %d" % (path, pos))
        pos += 16 + length
        step, summary = 0, None
        for field, wire, value in proto_fields(body):
            if field == 2 and wire == 0:
                step = value - (1 << 64) if value >= 1 << 63 else value
            elif field == 5 and wire == 2:
                summary = value
        if summary is not None:
            for tag, number in summary_scalars(summary):
                yield tag, step, number


# ---- series -----------------------------------------------------------------------------------


def add_point(series, metric, step, value):
    """Appends (step, value); a step at or before the last one starts a restarted run's points."""
    points = series.setdefault(metric, [])
    if points and step <= points[-1][0]:
        points[:] = [p for p in points if p[0] < step]
    points.append((step, value))


def jsonl_series(path):
    series = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not JSON (%s)" % (path, n, e))
            it = rec.get("iteration")
            if it is None:
                continue
            for key, value in rec.items():
                if key != "iteration" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    add_point(series, key, int(it), float(value))
    return series


def tensorboard_series(directory):
    series = {}
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    if not files:
        raise ValueError("%s: no events.out.tfevents.* files" % directory)
    for path in files:
        if path.endswith(".tmp"):
            continue
        for tag, step, value in read_tfevents(path):
            add_point(series, tag, step, value)
    return series


def find_sources(run):
    """(jsonl file or None, tensorboard directory or None) of a run argument."""
    if os.path.isfile(run):
        if os.path.basename(run).startswith("events.out.tfevents."):
            return None, os.path.dirname(run) or "."
        return run, None
    if not os.path.isdir(run):
        raise ValueError("%s: no such file or directory" % run)
    jsonl = sorted(glob.glob(os.path.join(run, "*.jsonl")))
    tb = None
    for d in (run, os.path.join(run, "tensorboard")):
        if glob.glob(os.path.join(d, "events.out.tfevents.*")):
            tb = d
            break
    return (jsonl[0] if jsonl else None), tb


def load_run(run, source):
    jsonl, tb = find_sources(run)
    if source == "jsonl" or (source == "auto" and jsonl):
        if not jsonl:
            raise ValueError("%s: no JSONL metrics file (logging.metrics_jsonl)" % run)
        return jsonl_series(jsonl), jsonl
    if not tb:
        raise ValueError("%s: no metrics found (neither *.jsonl nor TensorBoard event files)" % run)
    return tensorboard_series(tb), tb


def panels_of(metrics):
    """Groups metrics into panels: "X validation" joins X's panel when both are plotted."""
    panels = []
    for m in metrics:
        base = m[:-len(" validation")] if m.endswith(" validation") else None
        for p in panels:
            if base in p or m + " validation" in p:
                p.append(m)
                break
        else:
            panels.append([m])
    return panels


def label_of(run):
    run = run.rstrip("/")
    return os.path.basename(run) or run


def plot(runs, metrics, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = panels_of(metrics)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 4.5 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        for run, series in runs:
            for m in panel:
                points = [p for p in series.get(m, []) if math.isfinite(p[1])]
                if not points:
                    continue
                validation = m.endswith(" validation")
                name = m if len(runs) == 1 else "%s: %s" % (label_of(run), m)
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if validation else None,
                        markersize=4, linestyle="--" if validation else "-", label=name)
        ax.set_xlabel("iteration")
        ax.set_ylabel(panel[0])
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(", ".join(label_of(r) for r, _ in runs))
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directory, JSONL file or TensorBoard directory")
    ap.add_argument("--metric", action="append", help="metric to plot (repeatable; default: train and validation loss)")
    ap.add_argument("--source", choices=["auto", "jsonl", "tensorboard"], default="auto",
                    help="auto: the JSONL file when the run has one, else TensorBoard")
    ap.add_argument("--output", help="PNG to write (default RUN_DIR/loss.png, or metrics.png with --metric)")
    ap.add_argument("--dump-json", help="also write the parsed series as JSON {run: {metric: [[step, value]]}}")
    args = ap.parse_args(argv)
    metrics = args.metric or DEFAULT_METRICS
    try:
        runs = []
        for run in args.runs:
            series, where = load_run(run, args.source)
            missing = [m for m in metrics if m not in series]
            if len(missing) == len(metrics):
                raise ValueError("%s: none of %s logged (logged: %s)" % (where, ", ".join(metrics),
                                                                          ", ".join(sorted(series)) or "nothing"))
            for m in missing:
                print("plot_metrics: %s: no '%s' logged" % (where, m), file=sys.stderr)
            runs.append((run, series))
    except (ValueError, OSError) as e:
        print("plot_metrics: error: %s" % e, file=sys.stderr)
        return 1
    output = args.output or os.path.join(args.runs[0] if os.path.isdir(args.runs[0]) else
                                         os.path.dirname(args.runs[0]) or ".",
                                         "metrics.png" if args.metric else "loss.png")
    if args.dump_json:
        with open(args.dump_json, "w") as f:
            json.dump({run: {m: series.get(m, []) for m in metrics} for run, series in runs}, f)
    try:
        plot(runs, metrics, output)
    except ImportError as e:
        print("plot_metrics: error: matplotlib is needed (scripts/setup.sh installs python3-matplotlib): %s" % e,
              file=sys.stderr)
        return 1
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
