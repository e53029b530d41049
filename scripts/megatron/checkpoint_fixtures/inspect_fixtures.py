#!/usr/bin/env python3
"""Lists what the Megatron checkpoint fixtures contain, for a native (non-Python) reader.

For every save dir under tests/fixtures/megatron_ckpt it reports:
- torch_dist: each .metadata key (torch.distributed.checkpoint.metadata.Metadata
  .state_dict_metadata) with its global shape and chunks (offsets, sizes), or "bytes";
- every pickle: .metadata itself, data.pkl of each torch.save zip stored as an item of
  __0_0.distcp (at the offset/length of .metadata's storage_data), data.pkl of the legacy .pt
  files; the GLOBALs they reference (found by an unpickler that records find_class and builds
  nothing) and the opcodes they use (pickletools.genops);
- the legacy model_optim_rng.pt / distrib_optim.pt top-level structure.
Writes Markdown to stdout (the fixtures' INVENTORY.md is this output).

Usage: .mcore-venv/bin/python scripts/megatron/checkpoint_fixtures/inspect_fixtures.py [DIR]
"""

import io
import pickle
import pickletools
import sys
import zipfile
from collections import defaultdict
from pathlib import Path


class _Placeholder:
    """Stands for any object a pickle builds; accepts every construction step."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


def _recording_unpickler(data, found):
    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            found.add(f"{module}.{name}")
            return type(name, (_Placeholder,), {})

        def persistent_load(self, pid):
            return _Placeholder()

    return Recorder(io.BytesIO(data))


def pickle_globals_and_opcodes(data):
    found = set()
    _recording_unpickler(data, found).load()
    opcodes = {op.name for op, _, _ in pickletools.genops(data)}
    return found, opcodes


def zip_pickles(blob):
    """data.pkl (and any other .pkl) of a torch.save zip archive."""
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        return [(n, z.read(n)) for n in z.namelist() if n.endswith(".pkl")]


def load_metadata(path):
    import torch.distributed.checkpoint  # noqa: F401  (classes the pickle names)

    with open(path, "rb") as f:
        return pickle.load(f)


def describe_torch_dist(iter_dir, out, pickle_index):
    meta_path = iter_dir / ".metadata"
    md = load_metadata(meta_path)
    pickle_index[("metadata", str(meta_path))] = meta_path.read_bytes()
    out.append("| key | shape / kind | chunks (offsets; sizes) |\n| --- | --- | --- |")
    for key, m in sorted(md.state_dict_metadata.items()):
        if hasattr(m, "chunks"):
            chunks = "; ".join(f"{list(c.offsets)} {list(c.sizes)}" for c in m.chunks)
            out.append(f"| `{key}` | {list(m.size)} {str(m.properties.dtype)} | {chunks} |")
        else:
            out.append(f"| `{key}` | bytes | |")
    data = {}
    for index, info in md.storage_data.items():
        path = iter_dir / info.relative_path
        if path not in data:
            data[path] = path.read_bytes()
        blob = data[path][info.offset: info.offset + info.length]
        for name, pkl in zip_pickles(blob):
            pickle_index[("distcp item", f"{index.fqn}")] = pkl
    return md


def describe_legacy(iter_dir, out, pickle_index):
    import torch

    for pt in sorted(iter_dir.rglob("*.pt")):
        blob = pt.read_bytes()
        for name, pkl in zip_pickles(blob):
            pickle_index[("legacy", str(pt))] = pkl
        obj = torch.load(pt, map_location="cpu", weights_only=False)
        out.append(f"`{pt.relative_to(iter_dir)}`:\n")
        out.append("```")
        out.extend(_structure(obj, depth=0))
        out.append("```")


def _structure(obj, depth, max_items=12):
    import torch

    pad = "  " * depth
    lines = []
    if isinstance(obj, dict):
        items = list(obj.items())
        for k, v in items[:max_items] if depth > 1 else items:
            if isinstance(v, (dict, list, tuple)) and depth < 4:
                lines.append(f"{pad}{k!r}: {type(v).__name__}({len(v)})")
                lines.extend(_structure(v, depth + 1))
            else:
                lines.append(f"{pad}{k!r}: {_leaf(v)}")
        if depth > 1 and len(items) > max_items:
            lines.append(f"{pad}... ({len(items) - max_items} more)")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj[:4]):
            if isinstance(v, (dict, list, tuple)) and depth < 4:
                lines.append(f"{pad}[{i}]: {type(v).__name__}({len(v)})")
                lines.extend(_structure(v, depth + 1))
            else:
                lines.append(f"{pad}[{i}]: {_leaf(v)}")
        if len(obj) > 4:
            lines.append(f"{pad}... ({len(obj) - 4} more)")
    return lines


def _leaf(v):
    import torch

    if torch.is_tensor(v):
        return f"Tensor{list(v.shape)} {v.dtype}" + (f" = {v.item()}" if v.numel() == 1 else "")
    if type(v).__name__ == "Namespace":
        return f"argparse.Namespace ({len(vars(v))} fields)"
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else
                Path(__file__).resolve().parents[3] / "tests/fixtures/megatron_ckpt")
    out = ["# Megatron checkpoint fixtures: inventory", "",
           "Generated by scripts/megatron/checkpoint_fixtures/inspect_fixtures.py.", ""]
    globals_by_kind = defaultdict(set)
    opcodes_by_kind = defaultdict(set)
    for save_dir in sorted(p.parent for p in root.rglob("latest_checkpointed_iteration.txt")):
        it = (save_dir / "latest_checkpointed_iteration.txt").read_text().strip()
        iter_dir = save_dir / f"iter_{int(it):07d}"
        out.append(f"## {save_dir.relative_to(root)}\n")
        pickle_index = {}
        if (iter_dir / "metadata.json").exists():
            describe_torch_dist(iter_dir, out, pickle_index)
        else:
            describe_legacy(iter_dir, out, pickle_index)
        out.append("")
        for (kind, where), pkl in pickle_index.items():
            g, ops = pickle_globals_and_opcodes(pkl)
            label = kind if kind != "distcp item" else (
                "distcp item: common_state" if where.startswith("common_state")
                else "distcp item: tensor/bytes")
            globals_by_kind[label] |= g
            opcodes_by_kind[label] |= ops
    out.append("## Pickle GLOBALs and opcodes, over every pickle of every fixture\n")
    for label in sorted(globals_by_kind):
        out.append(f"### {label}\n")
        out.append("GLOBALs: " + ", ".join(f"`{g}`" for g in sorted(globals_by_kind[label])))
        out.append("")
        out.append("opcodes: " + ", ".join(sorted(opcodes_by_kind[label])))
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
