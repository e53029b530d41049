#!/usr/bin/env python3
"""transformers' own YaRN frequencies and attention factor for a Hugging Face directory (no torch).

Run with the .pyenv/bin/python that scripts/setup.sh makes (transformers, pinned there; numpy).
Loads DIR with transformers.AutoConfig.from_pretrained and calls
transformers.modeling_rope_utils._compute_yarn_parameters, transformers' code unchanged. The
.pyenv has no torch, so the few torch calls that function makes (torch.arange, .to(dtype=...),
torch.clamp, torch.float / torch.float32) are served by a numpy stand-in that computes in float32,
as torch does: the arithmetic between them (pow, division, the blend) is numpy's on float32
arrays, the correction range and the attention factor Python's floats, as in torch.

Prints {"transformers_version", "inv_freq": [...], "attention_factor": a} (the inverse frequencies
as float32 values written out in full). Exits 3 naming what is missing when transformers or numpy
is not importable (the caller turns that into a failure), 2 when the config's rope_type is not yarn.

Usage: hf_yarn_parameters.py DIR
Reference: transformers modeling_rope_utils.py (_compute_yarn_parameters, standardize_rope_params).
"""
import json
import sys

try:
    import numpy as np
    import transformers
    import transformers.modeling_rope_utils as rope_utils
except ImportError as e:
    print("hf_yarn_parameters.py: %s (run scripts/setup.sh, which installs transformers into .pyenv)" % e)
    sys.exit(3)


class _Tensor(np.ndarray):
    """A numpy array with torch's Tensor.to(device=..., dtype=...)."""

    def to(self, device=None, dtype=None):  # noqa: ARG002 - the device is the CPU
        return self if dtype is None else self.astype(dtype).view(_Tensor)


class _TorchStandIn:
    """The torch functions _compute_yarn_parameters calls, on numpy float32 arrays."""
    float = np.float32
    float32 = np.float32

    @staticmethod
    def arange(*args, dtype=None, device=None):  # noqa: ARG004
        a = np.arange(*args)  # int64, as torch.arange of ints
        return (a if dtype is None else a.astype(dtype)).view(_Tensor)

    @staticmethod
    def clamp(x, lo, hi):
        return np.clip(x, lo, hi).view(_Tensor)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    cfg = transformers.AutoConfig.from_pretrained(sys.argv[1])
    cfg.standardize_rope_params()
    if cfg.rope_parameters.get("rope_type") != "yarn":
        print("hf_yarn_parameters.py: rope_type %r is not yarn" % cfg.rope_parameters.get("rope_type"))
        sys.exit(2)
    if hasattr(rope_utils, "torch"):
        sys.exit("hf_yarn_parameters.py: this environment has torch; the numpy stand-in is for .pyenv without it")
    rope_utils.torch = _TorchStandIn()
    inv_freq, attention_factor = rope_utils._compute_yarn_parameters(cfg)
    assert inv_freq.dtype == np.float32, inv_freq.dtype
    print(json.dumps({"transformers_version": transformers.__version__,
                      "inv_freq": [float(v) for v in inv_freq], "attention_factor": float(attention_factor)}))


if __name__ == "__main__":
    main()
