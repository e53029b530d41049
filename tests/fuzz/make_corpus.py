#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/, docs/fuzzing.md):
small real files, copied from the test fixtures or written by the reference writers.

    <python with torch> tests/fuzz/make_corpus.py torch       (e.g. the venv of
                                                               scripts/megatron/checkpoint_fixtures/setup_venv.sh)
    <python with safetensors and numpy> tests/fuzz/make_corpus.py safetensors   (e.g. .pyenv)
    python3 tests/fuzz/make_corpus.py text                     (configs, flags, tracker)

Seeds whose name starts with "regress-" are the inputs that found defects; this script never
touches them. The seeds it writes:
  pickle/          torch.save's data.pkl of several files (protocol 2), pickles of protocols 0-5 of
                   the values Megatron saves, a DCP .metadata, the fixture evil.pkl
  torch_archive/   torch.save files: the fixture tensors.pt, strided / shared / empty / scalar /
                   bf16 / bool tensors, a Megatron-style dict with an argparse.Namespace
  dcp_metadata/    the .metadata of two fixture checkpoints (tests/fixtures/megatron_ckpt) and one
                   written by torch.distributed.checkpoint (a tensor, an int, a str)
  safetensors/     files written by safetensors.numpy.save (the dtypes numpy has, a scalar, an empty
                   tensor, __metadata__) and one bf16 file whose header is written here
  config_yaml/     configs/*.yaml (the tiny ones), one with overrides after a '#overrides' line
  megatron_flags/  the Megatron command lines of the checkpoint fixtures (record.json), one
                   argument a line, and flags with --moe-layer-freq expressions and batch-size
                   schedules
  ckpt_tracker/    tracker files: '2', '1000\\n', 'release'
and the dictionaries tests/fuzz/dict/<harness>.dict (libFuzzer's format: one "token" a line): the
format's magic numbers and names, written here; config_yaml's from docs/config.md (every
section.field), megatron_flags's from training/config/megatron_arguments.tsv (every flag).
"""
import argparse
import collections
import io
import json
import os
import pickle
import tempfile
import zipfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
fixtures = os.path.join(root, 'tests', 'fixtures')


def out(harness, name, data):
    d = os.path.join(here, 'corpus', harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def torch_bytes(obj):
    import torch
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def data_pkl(archive):
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        return z.read(next(n for n in z.namelist() if n.endswith('data.pkl')))


def torch_seeds():
    import torch
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    files = {
        'tensors.pt': open(os.path.join(fixtures, 'torch_files', 'tensors.pt'), 'rb').read(),
        'strided.pt': torch_bytes({'t': a.t(), 'col': a[:, 1], 'step': a[::2, ::3], 'a': a}),
        'dtypes.pt': torch_bytes([torch.ones(2, dtype=d) for d in (torch.bfloat16, torch.float16, torch.float64,
                                                                    torch.int32, torch.uint8, torch.bool)]),
        'empty_scalar.pt': torch_bytes({'empty': torch.zeros(0, 5), 'scalar': torch.tensor(3.5)}),
        'megatron_like.pt': torch_bytes({
            'args': argparse.Namespace(num_layers=2, hidden_size=8, tensor_model_parallel_size=1, seq_length=16),
            'checkpoint_version': 3.0, 'iteration': 2,
            'model': collections.OrderedDict([('embedding.word_embeddings.weight', torch.randn(4, 8)),
                                              ('decoder.final_layernorm.weight', torch.ones(8))]),
            'rng_state': [{'random_rng_state': (3, tuple(range(5)), None)}]}),
    }
    for name, data in files.items():
        out('torch_archive', name, data)
        out('pickle', name.replace('.pt', '.data.pkl'), data_pkl(data))
    values = {'ints': [0, 1, -1, 255, 256, 65535, 65536, 2 ** 31, 2 ** 40, -2 ** 63],
              'text': ['', 'a', 'é', b'\x00\xff'], 'float': [0.5, -1e300],
              'nested': collections.OrderedDict(x=(1, (2, [3, {4: None}])), y=frozenset([1]), z={1, 2}),
              'ns': argparse.Namespace(a=True, b=None)}
    for proto in range(0, 6):
        out('pickle', f'values.proto{proto}.pkl', pickle.dumps(values, protocol=proto))
    out('pickle', 'evil.pkl', open(os.path.join(fixtures, 'torch_files', 'evil.pkl'), 'rb').read())


def dcp_seeds():
    import torch
    for fam in ('llama/torch_dist', 'moe/torch_dist_distopt'):
        meta = open(os.path.join(fixtures, 'megatron_ckpt', fam, 'iter_0000002', '.metadata'), 'rb').read()
        out('dcp_metadata', fam.replace('/', '_') + '.metadata', meta)
        if fam == 'llama/torch_dist':
            out('pickle', 'llama_torch_dist.metadata', meta)
    import torch.distributed.checkpoint as dcp
    with tempfile.TemporaryDirectory() as d:
        dcp.save({'w': torch.arange(6, dtype=torch.float32).reshape(2, 3), 'step': 7, 'name': 'x'},
                 storage_writer=dcp.FileSystemWriter(d, single_file_per_rank=True))
        out('dcp_metadata', 'written.metadata', open(os.path.join(d, '.metadata'), 'rb').read())


def safetensors_seeds():
    import struct
    import numpy as np
    from safetensors.numpy import save
    out('safetensors', 'dtypes.safetensors', save({
        'f32': np.arange(6, dtype=np.float32).reshape(2, 3), 'f16': np.ones((2, 2), dtype=np.float16),
        'f64': np.ones(1, dtype=np.float64), 'i64': np.array([-1, 7], dtype=np.int64),
        'i32': np.array([3], dtype=np.int32), 'u8': np.array([1, 2, 3], dtype=np.uint8),
        'bool': np.array([True, False])}))
    out('safetensors', 'scalar_empty_meta.safetensors', save(
        {'scalar': np.array(2.5, dtype=np.float32), 'empty': np.zeros((0, 4), dtype=np.float32)},
        metadata={'format': 'pt', 'step': '3'}))
    header = json.dumps({'w': {'dtype': 'BF16', 'shape': [2, 2], 'data_offsets': [0, 8]}}).encode()
    header += b' ' * (-len(header) % 8)
    out('safetensors', 'bf16.safetensors', struct.pack('<Q', len(header)) + header + bytes([0, 0x3f, 0x80, 0x3f] * 2))


def config_seeds():
    for name in ('gpt_tiny', 'moe_tiny', 'hybrid_tiny', 'glm_mhc_tiny'):
        out('config_yaml', name + '.yaml', open(os.path.join(root, 'configs', name + '.yaml'), 'rb').read())
    text = open(os.path.join(root, 'configs', 'gpt_tiny.yaml')).read()
    out('config_yaml', 'gpt_tiny_overrides.yaml', (text.rstrip('\n') + '\n#overrides\ntraining.train_iters=5\n'
                                                   'model.num_layers=2\noptimizer.lr=0.001\n').encode())


def flag_seeds():
    for fam in ('llama', 'moe', 'mtp'):
        record = json.load(open(os.path.join(fixtures, 'megatron_ckpt', fam, 'record.json')))
        for fmt, argv in sorted(record['megatron_argv'].items())[:1]:
            out('megatron_flags', f'{fam}_{fmt}.args', '\n'.join(argv).encode())
    out('megatron_flags', 'moe_layer_freq.args', '\n'.join([
        '--num-layers', '4', '--num-experts', '4', '--moe-router-topk', '2', '--moe-layer-freq', '([0]*1+[1]*3)',
        '--hidden-size', '64', '--num-attention-heads', '4', '--seq-length', '32',
        '--max-position-embeddings', '32', '--micro-batch-size', '2', '--global-batch-size', '8']).encode())
    out('megatron_flags', 'rampup.args', '\n'.join([
        '--num-layers', '2', '--hidden-size', '32', '--num-attention-heads', '4', '--micro-batch-size', '1',
        '--global-batch-size', '16', '--rampup-batch-size', '4', '4', '100', '--train-samples', '1000']).encode())
    out('megatron_flags', 'step_schedule.args', '\n'.join([
        '--num-layers', '2', '--hidden-size', '32', '--num-attention-heads', '4', '--micro-batch-size', '1',
        '--step-batch-size-schedule', '0:4 1000:8', '--train-iters', '10', 'training.seed=3']).encode())


def tracker_seeds():
    out('ckpt_tracker', 'two', b'2')
    out('ckpt_tracker', 'thousand_newline', b'1000\n')
    out('ckpt_tracker', 'release', b'release')


def dict_file(harness, tokens):
    def quote(t):
        b = t if isinstance(t, bytes) else t.encode()
        return '"' + ''.join(chr(c) if 32 <= c < 127 and c not in (34, 92) else '\\x%02x' % c for c in b) + '"'
    os.makedirs(os.path.join(here, 'dict'), exist_ok=True)
    with open(os.path.join(here, 'dict', harness + '.dict'), 'w') as f:
        f.write(f'# libFuzzer dictionary of fuzz_{harness}: written by tests/fuzz/make_corpus.py dict\n')
        for t in dict.fromkeys(tokens):
            f.write(quote(t) + '\n')


PICKLE_TOKENS = [b'\x80\x02', b'\x80\x04\x95', b'\x80\x05', b'.', b'(', b'\x8c', b'X', b'q', b'h', b'r', b'j',
                 b'\x94', b'\x93', b'R', b'\x81', b'b', b'Q', b'}', b']', b')', b'\x85', b'\x86', b'\x87', b'u',
                 b's', b'e', b'a', b't', b'l', b'd', b'K', b'M', b'J', b'\x8a', b'\x8b', b'G', b'\x88', b'\x89', b'N',
                 b'ccollections\nOrderedDict\n', b'ctorch._utils\n_rebuild_tensor_v2\n', b'ctorch\nFloatStorage\n',
                 b'ctorch\nBFloat16Storage\n', b'cargparse\nNamespace\n', b'c_codecs\nencode\n',
                 b'ctorch\nSize\n', b'ctorch._tensor\n_rebuild_from_type_v2\n', b'ctorch._utils\n_rebuild_parameter\n',
                 'storage', 'cpu', 'latin1', 'torch', 'collections', 'OrderedDict', 'torch._utils', '_rebuild_tensor_v2',
                 'FloatStorage', 'LongStorage', 'BoolStorage', 'argparse', 'Namespace', 'megatron.core.enums', 'ModelType',
                 'numpy.core.multiarray', '_reconstruct', 'numpy', 'ndarray', 'dtype', 'builtins', 'getattr']
DCP_TOKENS = ['torch.distributed.checkpoint.metadata', 'Metadata', 'TensorStorageMetadata', 'TensorProperties',
              'ChunkStorageMetadata', 'BytesStorageMetadata', 'MetadataIndex', 'torch.distributed.checkpoint.filesystem',
              '_StorageInfo', 'state_dict_metadata', 'storage_data', 'planner_data', 'properties', 'size', 'chunks',
              'offsets', 'sizes', 'fqn', 'offset', 'index', 'relative_path', 'length', 'dtype', '__0_0.distcp',
              '.metadata', 'float32', 'bfloat16', 'int64']
ZIP_TOKENS = [b'PK\x03\x04', b'PK\x01\x02', b'PK\x05\x06', b'PK\x06\x06', b'PK\x06\x07', b'\xff\xff\xff\xff',
              b'\x01\x00', 'archive/data.pkl', 'archive/data/0', 'archive/byteorder', 'little', 'big', 'data.pkl',
              'archive/version', '3\n']


def dict_seeds():
    dict_file('pickle', PICKLE_TOKENS)
    dict_file('torch_archive', ZIP_TOKENS + PICKLE_TOKENS)
    dict_file('dcp_metadata', PICKLE_TOKENS + DCP_TOKENS)
    dict_file('safetensors', ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', '"F64"', '"F16"',
                              '"BF16"', '"I64"', '"I32"', '"U8"', '"BOOL"', '"I8"', '"F8_E4M3"', '[]', '[0,0]', '{}',
                              ':', ',', b'\x00' * 7, b'\xff' * 8, '18446744073709551615', '-1', '1e20', '\\u0000'])
    import re
    fields = re.findall(r'^\| `([a-z_]+)\.([a-z_0-9.]+)`', open(os.path.join(root, 'docs', 'config.md')).read(), re.M)
    yaml = ['#overrides\n', ': null', ': true', ': []', '- ', '\n  ', '9223372036854775807', '-1', '1e308', 'nan', '.inf']
    dict_file('config_yaml', yaml + [s + ':\n' for s, _ in fields] + [f + ': ' for _, f in fields] +
              [f'{s}.{f}=' for s, f in fields])
    flags = [l.split('\t')[0] for l in open(os.path.join(root, 'training', 'config', 'megatron_arguments.tsv'))
             if l.startswith('--')]
    values = ['\n', '0', '1', '-1', '4', '9223372036854775807', '1e-8', 'none', 'true', '[1]*4', '([0]*1+[1]*3)',
              '([1]*2)*2', '0:16 1000:32', 'rope', 'swiglu', 'bf16']
    dict_file('megatron_flags', values + [f + '\n' for f in flags])
    dict_file('ckpt_tracker', ['release', '\n', ' ', '\r', '-', '+', '0x', '9223372036854775807', '18446744073709551616'])


if __name__ == '__main__':
    import sys
    parts = {'torch': [torch_seeds, dcp_seeds], 'safetensors': [safetensors_seeds],
             'text': [config_seeds, flag_seeds, tracker_seeds], 'dict': [dict_seeds]}
    for part in sys.argv[1:] or parts:
        for make in parts[part]:
            make()
