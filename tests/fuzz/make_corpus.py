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
    """DCP .metadata: two fixture checkpoints' (tests/fixtures/megatron_ckpt) cut to a few entries
    (small seeds keep the harness fast; the structure is Megatron's), and files written by
    torch.distributed.checkpoint (tensors of several dtypes, an int, a str, bytes)."""
    import torch
    import torch.distributed.checkpoint as dcp
    for fam, keep in (('llama/torch_dist', 4), ('moe/torch_dist_distopt', 6)):
        raw = open(os.path.join(fixtures, 'megatron_ckpt', fam, 'iter_0000002', '.metadata'), 'rb').read()
        if fam == 'llama/torch_dist':
            out('pickle', 'llama_torch_dist.metadata', raw)
        meta = pickle.loads(raw)
        every = sorted(meta.state_dict_metadata)
        names = every[::max(1, len(every) // keep)][:keep]
        meta.state_dict_metadata = {k: meta.state_dict_metadata[k] for k in names}
        meta.storage_data = {i: v for i, v in meta.storage_data.items() if i.fqn in names}
        for plan in getattr(meta, 'all_local_plans', None) or []:
            plan.items[:] = [item for item in plan.items if item.index.fqn in names]
        out('dcp_metadata', fam.replace('/', '_') + '_cut.metadata', pickle.dumps(meta))
    for name, state in (('written', {'w': torch.arange(6, dtype=torch.float32).reshape(2, 3), 'step': 7, 'name': 'x'}),
                        ('dtypes', {'a': {'bf16': torch.ones(2, 2, dtype=torch.bfloat16),
                                          'i64': torch.tensor([1, 2], dtype=torch.int64)},
                                    'blob': io.BytesIO(b'bytes'), 'scalar': torch.tensor(3.0)})):
        with tempfile.TemporaryDirectory() as d:
            dcp.save(state, storage_writer=dcp.FileSystemWriter(d, single_file_per_rank=True))
            out('dcp_metadata', name + '.metadata', open(os.path.join(d, '.metadata'), 'rb').read())


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


def dataset_seeds():
    """Megatron .idx/.bin pairs (indexed_dataset.py's layout) and the .npy index caches."""
    import struct
    import numpy as np

    def pair(name, docs, dtype=np.uint16, code=8, modes=False, sentences=None):
        seqs = sentences or [[d] for d in docs]
        flat = [s for doc in seqs for s in doc]
        lengths = np.array([len(s) for s in flat], dtype=np.int32)
        pointers = np.concatenate([[0], np.cumsum(lengths[:-1]) * np.dtype(dtype).itemsize]).astype(np.int64)
        doc_idx = np.concatenate([[0], np.cumsum([len(doc) for doc in seqs])]).astype(np.int64)
        idx = b'MMIDIDX\x00\x00' + struct.pack('<Q', 1) + struct.pack('<B', code)
        idx += struct.pack('<Q', len(flat)) + struct.pack('<Q', len(doc_idx))
        idx += lengths.tobytes() + pointers.tobytes() + doc_idx.tobytes()
        if modes:
            idx += np.zeros(len(flat), dtype=np.int8).tobytes()
        bin_ = b''.join(np.array(s, dtype=dtype).tobytes() for s in flat)
        out('indexed_dataset', name, struct.pack('<I', len(idx)) + idx + bin_)

    pair('u16_three_docs', [[1, 2, 3, 0], [5, 6, 0], [7, 0]])
    pair('i32_docs', [[70000, 1, 0], [2, 3, 4, 5, 0]], dtype=np.int32, code=4)
    pair('u16_sentences', [], sentences=[[[1, 2], [3, 0]], [[4, 5, 6, 0]]])
    pair('empty_document', [[], [1, 0]])
    pair('u8_one', [[9]], dtype=np.uint8, code=1)
    pair('i64_modes', [[1, 2], [3]], dtype=np.int64, code=5, modes=True)
    for name, arr, version in (('document_index', np.array([0, 2, 1, 0, 2, 1], dtype=np.int32), (1, 0)),
                               ('sample_index', np.array([[0, 0], [1, 3], [2, 1]], dtype=np.int64), (1, 0)),
                               ('shuffle_index', np.array([2, 0, 1], dtype=np.int64), (2, 0)),
                               ('scalar', np.array(5, dtype=np.int64), (1, 0)),
                               ('empty', np.zeros((0,), dtype=np.int32), (3, 0)),
                               ('u32', np.array([1, 4000000000], dtype=np.uint32), (1, 0))):
        b = io.BytesIO()
        np.lib.format.write_array(b, arr, version=version)
        out('npy', name + '.npy', b.getvalue())


def blend_seeds():
    """--per-split-data-args-path files (their text is also the --data-path words)."""
    for name, obj in (('weighted', {'train': ['0.3', 'a_text_document', '0.7', 'b_text_document'],
                                    'valid': 'c_text_document', 'test': [1, 'd_text_document']}),
                      ('strings', {'train': '30 a 70 b', 'valid': 'v', 'test': None}),
                      ('plain', {'train': ['a', 'b'], 'valid': ['c'], 'test': ['d']})):
        out('data_blend', name + '.json', json.dumps(obj).encode())
    out('data_blend', 'data_path.txt', b'0.5 /data/a_text_document 0.5 /data/b_text_document')


def jsonl_seeds():
    """preprocess inputs: JSONL documents (other keys, escapes, blank lines) and plain text."""
    lines = [{'text': 'Hello world.', 'id': 1}, {'text': 'caf\u00e9 \u2014 \U0001f600\nline two', 'meta': {'a': [1, 2]}},
             {'id': 3, 'text': ''}, {'text': 'tab\there "quoted" \\ back'}]
    out('preprocess_jsonl', 'docs.jsonl', ('\n'.join(json.dumps(l) for l in lines) + '\n\n').encode())
    out('preprocess_jsonl', 'ascii_false.jsonl',
        ('\n'.join(json.dumps(l, ensure_ascii=False) for l in lines) + '\n').encode())
    out('preprocess_jsonl', 'paragraphs.txt', b'First paragraph,\nstill first.\n\n  \nSecond one.\r\n\r\nThird\n')


def tokenizer_seeds():
    """tokenizer.json files of every family the tokenizer tests train (tests/tokenizer/make_reference.py),
    trained here on a few kilobytes with a small vocabulary, each with its tokenizer_config.json and a
    text; and two small SentencePiece models (BPE with byte fallback, unigram) with a text."""
    import struct
    import sys
    sys.path.insert(0, os.path.join(root, 'tests', 'tokenizer'))
    import make_reference as ref
    ref.VOCAB_SIZE = 300
    text = open('/usr/share/common-licenses/GPL-3', encoding='utf-8').read()[:20000]
    lines = text.split('\n')
    sample = 'Hello, World! caf\u00e9 123456 \u4e16\u754c  \t<|endoftext|> </s> x\u0301 \U0001f600'.encode()
    with tempfile.TemporaryDirectory() as d:
        made = {name: getattr(ref, name)(lines, os.path.join(d, name)) for name in
                ('llama3', 'qwen2', 'components', 'splits', 'regex_empty', 'regex_escapes', 'regex_classes')}
        sp_bpe = ref.train_sentencepiece_bpe(lines)
        ref.llama2_hf(sp_bpe, os.path.join(d, 'llama2_hf'))
        ref.mistral_hf(sp_bpe, os.path.join(d, 'mistral_hf'))
        for name in list(made) + ['llama2_hf', 'mistral_hf']:
            spec = json.load(open(os.path.join(d, name, 'tokenizer.json'), encoding='utf-8'))
            config = open(os.path.join(d, name, 'tokenizer_config.json'), 'rb').read()
            compact = json.dumps(spec, ensure_ascii=False, separators=(',', ':')).encode()
            out('hf_tokenizer', name, compact + b'\0' + config + b'\0' + sample)
        train_file = os.path.join(d, 'train.txt')
        open(train_file, 'w', encoding='utf-8').write(text)
        for name, settings in (('bpe_byte_fallback', dict(model_type='bpe', byte_fallback=True, vocab_size=400,
                                                          split_digits=True, normalization_rule_name='identity',
                                                          unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.98)),
                               ('unigram', dict(model_type='unigram', vocab_size=150, pad_id=3, character_coverage=0.98,
                                                normalization_rule_name='identity'))):
            import sentencepiece as spm
            spm.SentencePieceTrainer.train(input=train_file, model_prefix=os.path.join(d, name), minloglevel=2,
                                           **settings)
            model = open(os.path.join(d, name + '.model'), 'rb').read()
            out('sentencepiece', name, struct.pack('<H', len(sample)) + sample + model)


def hf_config_seeds():
    """config.json of every family strata import reads, as transformers writes them (tiny sizes)."""
    import transformers
    small = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64)
    configs = {
        'llama': transformers.LlamaConfig(**small, rope_scaling={'rope_type': 'llama3', 'factor': 8.0,
                                                                 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                                                                 'original_max_position_embeddings': 32}),
        'qwen3': transformers.Qwen3Config(**small, head_dim=16),
        'mixtral': transformers.MixtralConfig(**small, num_local_experts=4, num_experts_per_tok=2),
        'qwen3_moe': transformers.Qwen3MoeConfig(**small, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
        'gpt2': transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64),
        'deepseek_v3': transformers.DeepseekV3Config(**small, moe_intermediate_size=32, n_routed_experts=4,
                                                     num_experts_per_tok=2, n_group=2, topk_group=1, kv_lora_rank=16,
                                                     q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                                     v_head_dim=16, first_k_dense_replace=1),
        'gpt_oss': transformers.GptOssConfig(**small, num_local_experts=4, num_experts_per_tok=2, head_dim=16,
                                             sliding_window=16),
        'nemotron_h': transformers.NemotronHConfig(vocab_size=128, hidden_size=64, num_hidden_layers=4,
                                                   hybrid_override_pattern='M*-E', num_attention_heads=4,
                                                   num_key_value_heads=2, intermediate_size=128),
    }
    for name, cfg in configs.items():
        arch = {'llama': 'LlamaForCausalLM', 'qwen3': 'Qwen3ForCausalLM', 'mixtral': 'MixtralForCausalLM',
                'qwen3_moe': 'Qwen3MoeForCausalLM', 'gpt2': 'GPT2LMHeadModel', 'deepseek_v3': 'DeepseekV3ForCausalLM',
                'gpt_oss': 'GptOssForCausalLM', 'nemotron_h': 'NemotronHForCausalLM'}[name]
        cfg.architectures = [arch]
        out('hf_config', name + '.json', cfg.to_json_string().encode())


def golden_seeds():
    """Golden-value files of functional cases (full-precision blocks, a platform fingerprint) and a
    legacy list-valued one."""
    import glob
    for path in sorted(glob.glob(os.path.join(root, 'tests', 'functional', '*', '*', 'golden_values_cpu.json')))[:2]:
        out('golden', os.path.basename(os.path.dirname(path)) + '.json', open(path, 'rb').read())
    out('golden', 'legacy_list.json', json.dumps({'lm loss': {'start_step': 1, 'end_step': 5, 'step_interval': 2,
                                                              'values': [10.5, 'nan', 9.25]}}).encode())


def manifest_seeds(strata):
    """manifest.json of checkpoints written by `strata train` (the tiny GPT and MoE configs, one layer),
    cut to four parameters with their optimizer states (small seeds keep the harness fast: it is
    JSON parsing, three times an input, as a resume reads the manifest)."""
    import subprocess
    for name in ('gpt_tiny', 'moe_tiny'):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([strata, 'train', '--config', os.path.join(root, 'configs', name + '.yaml'),
                            'training.train_iters=1', 'model.num_layers=1', 'optimizer.lr_warmup_iters=0',
                            'data.mock_data=true', 'data.data_path=[]', 'checkpoint.save=' + d,
                            'checkpoint.save_interval=1', 'logging.log_interval=1'],
                           check=True, stdout=subprocess.DEVNULL, cwd=d)
            text = open(os.path.join(d, 'iter_0000001', 'manifest.json'), 'rb').read()
        m = json.loads(text)
        keep = m['parameters'][:4]
        m['parameters'] = keep
        m['tensors'] = {k: v for k, v in m['tensors'].items() if k in keep or k.split('.', 1)[-1].split('.', 1)[-1] in keep}
        out('ckpt_manifest', name + '_4_params.json', json.dumps(m).encode())


def router_trace_seeds():
    """router_trace_rank0.jsonl files: Megatron's spelling (json.dumps) and a compact one, Strata's
    keys (micro_batch, phase, dropped), an MTP head, evaluation records and decode-sized steps."""
    import random
    rng = random.Random(0)

    def rec(step, layer, T, k, E=8, **extra):
        r = {'step': step, 'stage': 'pre_dispatch', 'block': 'decoder', 'layer': layer, 'rank': 0,
             'num_tokens': T, 'topk': k}
        r.update({key: v for key, v in extra.items() if key in ('block', 'mtp_idx')})
        r['top_indices'] = [rng.sample(range(E), k) for _ in range(T)]
        r.update({key: v for key, v in extra.items() if key not in ('block', 'mtp_idx')})
        return r

    def write(name, records, seps=(', ', ': ')):
        out('router_trace', name, ''.join(json.dumps(r, separators=seps) + '\n' for r in records).encode())

    write('megatron', [rec(s, l, 4, 2) for s in (1, 2) for l in (1, 2)])
    write('strata_compact', [rec(1, l, 3, 2, micro_batch=0, phase=ph, dropped=[[0, 1]]) for ph in ('train', 'eval')
                             for l in (1, 3)], seps=(',', ':'))
    write('mtp', [rec(1, 1, 2, 2), rec(1, 0, 2, 2, block='mtp', mtp_idx=0)])
    write('decode_steps', [rec(s, l, 1 if s > 1 else 6, 2) for s in (1, 2, 3) for l in (1, 2)])
    out('router_trace', 'cut_last_line', (json.dumps(rec(1, 1, 2, 2)) + '\n' + json.dumps(rec(1, 2, 2, 2))[:40]).encode())


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
    dict_file('router_trace', ['"step": ', '"layer": ', '"rank": ', '"num_tokens": ', '"topk": ', '"top_indices": ',
                               '"block": ', '"mtp_idx": ', '"stage": ', '"micro_batch": ', '"phase": ', '"dropped": ',
                               '"decoder"', '"mtp"', '"train"', '"eval"', '"pre_dispatch"', '[[', ']]', '], [', ', ',
                               '{', '}', '\n', 'null', '-1', '1e3', '9223372036854775807', 'NaN', 'Infinity'])
    dict_file('indexed_dataset', [b'MMIDIDX\x00\x00', b'\x01\x00\x00\x00\x00\x00\x00\x00', b'\x08', b'\x04', b'\x05',
                                  b'\xff\xff\xff\xff', b'\x00\x00\x00\x00\x00\x00\x00\x80'])
    dict_file('npy', [b'\x93NUMPY', b'\x01\x00', b'\x02\x00', b'\x03\x00', "{'descr': '<i8', 'fortran_order': False, 'shape': (",
                      "'<i4'", "'<u4'", "'<u8'", "'>i8'", 'True', '(3,)', '(2, 2)', '()', '(0,)', '9223372036854775807'])
    dict_file('data_blend', ['"train"', '"valid"', '"test"', ': [', '"0.5"', '1e308', '-1', 'nan', 'inf', '0', 'null',
                             '"a_text_document"'])
    dict_file('preprocess_jsonl', ['{"text": ', '"text"', '\\u0000', '\\ud800', '\\n', '\n\n', '\r\n', 'null', '[]'])
    dict_file('hf_config', ['"architectures"', '"model_type"', '"hidden_size"', '"num_hidden_layers"',
                            '"num_attention_heads"', '"num_key_value_heads"', '"intermediate_size"', '"vocab_size"',
                            '"rope_scaling"', '"rope_theta"', '"head_dim"', '"num_local_experts"', '"num_experts"',
                            '"num_experts_per_tok"', '"sliding_window"', '"layer_types"', '"tie_word_embeddings"',
                            '"hybrid_override_pattern"', '"kv_lora_rank"', '"q_lora_rank"', '"n_routed_experts"',
                            '{"__float__": "Infinity"}', 'NaN', '-Infinity', '0', '-1', '1e308', 'null', 'true',
                            '"LlamaForCausalLM"', '"DeepseekV3ForCausalLM"', '"GptOssForCausalLM"', '"NemotronHForCausalLM"'])
    dict_file('golden', ['"start_step"', '"end_step"', '"step_interval"', '"values"', '"value_precision"', '"full"',
                         '"platform"', '"lm loss"', '"nan"', 'NaN', '1e308', '-1', '{"1": ', '[]'])
    dict_file('ckpt_manifest', ['"format"', '"strata-checkpoint"', '"version"', '"files"', '"tensors"', '"pieces"',
                                '"offsets"', '"shape"', '"dtype"', '"f32"', '"bf16"', '"file"', '"key"', '"bytes"',
                                '"crc32c"', '"iteration"', '"parameters"', '"optimizer"', '"config"', '"scheduler"',
                                '-1', '9223372036854775807', '18446744073709551615', '[]', '{}', 'null'])
    dict_file('hf_tokenizer', ['"type"', '"normalizer"', '"pre_tokenizer"', '"model"', '"decoder"', '"post_processor"',
                               '"added_tokens"', '"vocab"', '"merges"', '"Sequence"', '"ByteLevel"', '"Split"',
                               '"Metaspace"', '"Replace"', '"Prepend"', '"NFC"', '"NFKC"', '"Digits"', '"BPE"',
                               '"TemplateProcessing"', '"ByteFallback"', '"Fuse"', '"Strip"', '"Regex"', '"String"',
                               '"behavior"', '"Isolated"', '"MergedWithPrevious"', '"invert"', '"eos_token"',
                               '"bos_token"', '(?i:', '\\p{L}', '\\s+', '(?=', '[^', ']*', '{1,3}', b'\x00',
                               '"NFD"', '"NFKD"', '"Contiguous"', '"MergedWithNext"', '"Removed"', '"content"',
                               '"start"', '"stop"', '"prepend_scheme"', '"first"', '"always"', '"never"',
                               '"add_prefix_space"', '"use_regex"', '"trim_offsets"', '"individual_digits"',
                               '"ignore_merges"', '"byte_fallback"', '"fuse_unk"', '"unk_token"', '"lstrip"',
                               '"rstrip"', '"special"', '"normalized"', '"single"', '"pair"', '"special_tokens"',
                               '"SpecialToken"', '"Sequence"', '"replacement"', '"pattern"', '"split"'])
    dict_file('sentencepiece', [b'\x0a', b'\x12', b'\x1a', b'\x22', b'\x15\x00\x00\x80\xbf', '<unk>', '<s>',
                                '</s>', '\u2581', '<0x00>'])
    dict_file('ckpt_tracker', ['release', '\n', ' ', '\r', '-', '+', '0x', '9223372036854775807', '18446744073709551616'])


if __name__ == '__main__':
    import sys
    parts = {'torch': [torch_seeds, dcp_seeds], 'safetensors': [safetensors_seeds, dataset_seeds],
             'text': [config_seeds, flag_seeds, tracker_seeds, blend_seeds, jsonl_seeds, golden_seeds,
                      router_trace_seeds],
             'tokenizers': [tokenizer_seeds], 'transformers': [hf_config_seeds], 'dict': [dict_seeds]}
    args = sys.argv[1:]
    if args[:1] == ['manifest']:
        manifest_seeds(args[1])  # the strata executable
        sys.exit(0)
    for part in args or parts:
        for make in parts[part]:
            make()
