"""CPU stand-ins for the CUDA-only calls Megatron-Core 0.19.2's training path makes.

make_fixtures.py runs megatron.training (initialize_megatron, get_model, get_megatron_optimizer,
train_step, save_checkpoint, load_checkpoint) in one CPU process over a world-size-1 gloo group.
Megatron assumes a GPU in a few dozen places; each stand-in below replaces one such call with its
CPU meaning and says which. Nothing here changes any numerics: the model runs in fp32 on the CPU,
the "CUDA" random generator is the CPU one, and the world-size-1 collectives are copies.

install() must run before megatron is imported.
"""

import contextlib

import torch
import torch.distributed as dist

_CUDA_DEVICE_TYPES = ("cuda",)


def _is_cuda_device(device):
    if device is None:
        return False
    if isinstance(device, int):  # torch.cuda.current_device()-style ordinal
        return True
    if isinstance(device, str):
        return device.split(":")[0] in _CUDA_DEVICE_TYPES
    if isinstance(device, torch.device):
        return device.type in _CUDA_DEVICE_TYPES
    return False


def _cpu_device_kwarg(fn):
    """Wraps a tensor factory so that device='cuda' / cuda:N / an ordinal becomes the CPU."""

    def wrapped(*args, **kwargs):
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        kwargs.pop("pin_memory", None)  # pinned host memory needs CUDA; plain memory here
        return fn(*args, **kwargs)

    wrapped.__wrapped__ = fn
    return wrapped


class _NullStream:
    """Replaces torch.cuda.Stream / current_stream(): the CPU runs everything in program order."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, *args, **kwargs):
        pass

    def wait_event(self, *args, **kwargs):
        pass

    def record_event(self, *args, **kwargs):
        return _NullEvent()

    def synchronize(self):
        pass


class _NullEvent:
    """Replaces torch.cuda.Event: nothing asynchronous to record or wait on."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        pass

    def wait(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


def _install_torch_cuda():
    c = torch.cuda
    # initialize_megatron/_initialize_distributed: a device count > 0 makes it build Megatron's
    # model-parallel groups (mpu.initialize_model_parallel) and seed the "CUDA" RNG tracker.
    c.device_count = lambda: 1
    # torch.cuda.set_device(local_rank) in _initialize_distributed: nothing to select.
    c.set_device = lambda *a, **k: None
    # torch.cuda.current_device(): used as device= for buffers (DDP grad buffers, optimizer
    # flags, MoE aux-loss scale); the CPU is the device.
    c.current_device = lambda: "cpu"
    # Streams and events (DDP communication stream, timers): program order on the CPU.
    c.Stream = _NullStream
    c.current_stream = lambda *a, **k: _NullStream()
    c.default_stream = lambda *a, **k: _NullStream()
    c.stream = lambda *a, **k: contextlib.nullcontext()
    c.Event = _NullEvent
    # torch.cuda.synchronize / empty_cache (timers, checkpointing): nothing to wait for or free.
    c.synchronize = lambda *a, **k: None
    c.empty_cache = lambda *a, **k: None
    # Memory statistics (training_log, report_memory): zero on a CPU run.
    c.memory_allocated = lambda *a, **k: 0
    c.max_memory_allocated = lambda *a, **k: 0
    c.memory_reserved = lambda *a, **k: 0
    c.max_memory_reserved = lambda *a, **k: 0
    c.reset_peak_memory_stats = lambda *a, **k: None
    # The CUDA generator (model_parallel_cuda_manual_seed, CudaRNGStatesTracker, the rng_state
    # saved in checkpoints as 'cuda_rng_state'): the CPU generator stands in for it.
    c.get_rng_state = lambda *a, **k: torch.get_rng_state()
    c.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    c.manual_seed = lambda seed: torch.default_generator.manual_seed(int(seed))
    # torch.manual_seed itself calls torch.cuda.manual_seed_all after seeding the CPU: no-op.
    c.manual_seed_all = lambda seed: None
    c.random.get_rng_state = c.get_rng_state
    c.random.set_rng_state = c.set_rng_state


def _install_tensor_methods():
    # Module.cuda() / Tensor.cuda() (get_model moves the model, the optimizer moves state):
    # the tensors already live on the CPU.
    torch.nn.Module.cuda = lambda self, *a, **k: self
    torch.Tensor.cuda = lambda self, *a, **k: self
    # Tensor.pin_memory(): plain host memory.
    torch.Tensor.pin_memory = lambda self, *a, **k: self

    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        # tensor.to('cuda') / .to(device=torch.cuda.current_device()): stay on the CPU.
        if args and _is_cuda_device(args[0]):
            args = ("cpu",) + args[1:]
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        return original_to(self, *args, **kwargs)

    torch.Tensor.to = to

    original_type = torch.Tensor.type

    def tensor_type(self, dtype=None, non_blocking=False, **kwargs):
        # param.type() == 'torch.cuda.FloatTensor' (Float16OptimizerWithFloat16Params,
        # DistributedOptimizer._build_model_and_main_param_groups) picks the fp32 branch by the
        # CUDA type name; report the CPU tensor under the name the GPU run would see.
        if dtype is None and not kwargs:
            name = original_type(self)
            if name.startswith("torch.") and not name.startswith("torch.cuda."):
                return "torch.cuda." + name[len("torch."):]
            return name
        return original_type(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = tensor_type


_FACTORIES = (
    "tensor", "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint",
    "zeros_like", "ones_like", "empty_like", "full_like", "as_tensor", "linspace", "eye",
)


def _install_factories():
    # About 16 call sites build tensors with device='cuda' or device=torch.cuda.current_device()
    # (checkpointing's iteration all-reduce, MegatronOptimizer's found_inf / _scale_one,
    # DistributedOptimizer's gather buffers, DDP's buffers): they get CPU tensors.
    for name in _FACTORIES:
        setattr(torch, name, _cpu_device_kwarg(getattr(torch, name)))


def _install_collectives():
    # DDP (param_and_grad_buffer) with the distributed optimizer reduce-scatters the gradient
    # buffer and all-gathers the parameter buffer with reduce_scatter_tensor /
    # all_gather_into_tensor, which gloo lacks. Over a single rank both are a copy (SUM or AVG
    # over one rank is the identity); any larger group goes to the real collective.
    original_rs = dist.reduce_scatter_tensor
    original_ag = dist.all_gather_into_tensor

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if dist.get_world_size(group) == 1:
            if output.data_ptr() != input.data_ptr():
                output.copy_(input)
            return _DoneWork() if async_op else None
        return original_rs(output, input, op=op, group=group, async_op=async_op)

    def all_gather_into_tensor(output, input, group=None, async_op=False):
        if dist.get_world_size(group) == 1:
            if output.data_ptr() != input.data_ptr():
                output.copy_(input)
            return _DoneWork() if async_op else None
        return original_ag(output, input, group=group, async_op=async_op)

    dist.reduce_scatter_tensor = reduce_scatter_tensor
    dist.all_gather_into_tensor = all_gather_into_tensor
    dist._reduce_scatter_base = reduce_scatter_tensor
    dist._all_gather_base = all_gather_into_tensor


class _DoneWork:
    """The handle of a collective that already finished (world size 1)."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


def install_megatron():
    """Stand-ins inside megatron itself; call after importing megatron.training."""
    import megatron.core.datasets.utils as dataset_utils

    # initialize_megatron's _compile_dependencies runs `make` for the C++ dataset index helpers;
    # the PyPI package ships no Makefile, and these fixtures feed explicit token arrays (no
    # Megatron dataset), so there is nothing to compile.
    dataset_utils.compile_helpers = lambda: None

    import megatron.training.training as mtraining

    original_load = mtraining.load_checkpoint

    def load_checkpoint(model, optimizer, *args, **kwargs):
        # Without Transformer Engine or Apex the inner optimizer is torch's Adam(W), which keeps
        # `step` per parameter in its state (FusedAdam keeps it in param_groups):
        # (1) DistributedOptimizer.state_dict() asserts that the inner state holds exactly one
        #     step value, so a fresh optimizer (empty state) cannot build the template that
        #     load_checkpoint fills. Megatron's own _init_optimizer_states_with_dummy_values
        #     (used for its fsdp_dtensor loads) allocates that state first; the load overwrites
        #     it, parameters included.
        # (2) After the load every parameter's Adam `step` must be the saved step count, each in
        #     its own tensor. torch's load_state_dict gives all parameters one shared `step`
        #     tensor when the checkpoint keeps one step (torch_dist's 'common_step'; the
        #     distributed optimizer's single step), so each in-place `step += 1` would advance it
        #     once per parameter. The distributed optimizer keeps the loaded step in its
        #     param_groups (FusedAdam's place). Each parameter gets a copy of its param group's
        #     'step' where the group has one, else a copy of its own: what a never-saved
        #     optimizer holds at that iteration.
        # (3) Not CPU-specific: with fp32 parameters the DistributedOptimizer's main params are
        #     views of the model params (DistributedOptimizer._build_model_and_main_param_groups),
        #     and load_parameter_state_from_dp_reshardable copies into them outside no_grad,
        #     which autograd refuses ("a view of a leaf Variable that requires grad is being used
        #     in an in-place operation"; Megatron-LM HEAD has the same code). The load runs under
        #     torch.no_grad(), which only affects that refusal.
        for opt in _inner_optimizers(optimizer):
            if hasattr(opt, "_init_optimizer_states_with_dummy_values") and not opt.optimizer.state:
                opt._init_optimizer_states_with_dummy_values()
        with torch.no_grad():
            result = original_load(model, optimizer, *args, **kwargs)
        for opt in _inner_optimizers(optimizer):
            torch_opt = getattr(opt, "optimizer", opt)
            for group in torch_opt.param_groups:
                for param in group["params"]:
                    state = torch_opt.state.get(param, {})
                    if not torch.is_tensor(state.get("step")):
                        continue
                    if "step" in group:
                        state["step"] = torch.tensor(float(group["step"]), dtype=torch.float32)
                    else:
                        state["step"] = state["step"].clone()
        return result

    mtraining.load_checkpoint = load_checkpoint

    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    original_set_states = DistributedOptimizer._set_main_param_and_optimizer_states

    def set_main_param_and_optimizer_states(self, model_param, tensors):
        # Without Transformer Engine the inner torch Adam state holds a per-parameter 'step'
        # tensor, which FusedAdam's does not; load_parameter_state_from_dp_reshardable /
        # _from_dp_zero copy every state tensor from the saved per-parameter tensors, which
        # have no 'step' (KeyError 'step'). The step is left out of that copy here and set
        # from the loaded param_groups by load_checkpoint above.
        group_index, group_order = self.model_param_group_index_map[model_param]
        main_param = self.optimizer.param_groups[group_index]["params"][group_order]
        state = self.optimizer.state.get(main_param, {})
        step = state.pop("step", None)
        try:
            original_set_states(self, model_param, tensors)
        finally:
            if step is not None:
                state["step"] = step

    DistributedOptimizer._set_main_param_and_optimizer_states = set_main_param_and_optimizer_states


def _inner_optimizers(optimizer):
    if optimizer is None:
        return []
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


_installed = False


def install():
    global _installed
    if _installed:
        return
    _installed = True
    _install_torch_cuda()
    _install_tensor_methods()
    _install_factories()
    _install_collectives()
