"""Drives Megatron-Core 0.19.2's own training code for one fixture run, in this CPU process.

What it calls, all from the installed megatron package:
- megatron/training/arguments.py: parse_args (with sys.argv set to the case's argv), validate_args;
- megatron/training/global_vars.py: set_global_variables (builds the NullTokenizer, so Megatron
  pads the vocabulary itself);
- megatron/training/initialize.py: initialize_megatron (gloo, world size 1; CUDA assertion off by
  allow_no_cuda, the rest through cpu_standins);
- megatron/training/training.py: setup_model_and_optimizer (get_model + DDP, get_megatron_optimizer,
  get_optimizer_param_scheduler, and load_checkpoint when --load is given), train_step with the
  forward_backward_func of megatron/core/pipeline_parallel/schedules.py, save_checkpoint_and_time
  (-> megatron/training/checkpointing.py save_checkpoint), num_floating_point_operations;
- the model is gpt_builders.gpt_builder's construction (GPTModel with get_gpt_layer_local_spec /
  get_gpt_decoder_block_spec / get_gpt_mtp_block_spec), and forward_step/loss_func are
  pretrain_gpt.py's (those two files are not in the PyPI package; their code is mirrored here).
"""

import sys
from functools import partial

import cpu_standins

cpu_standins.install()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from megatron.core.enums import ModelType  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import (  # noqa: E402
    get_gpt_decoder_block_spec,
    get_gpt_decoder_layer_specs,
    get_gpt_layer_local_spec,
    get_gpt_mtp_block_spec,
)
from megatron.core.num_microbatches_calculator import get_num_microbatches  # noqa: E402
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: E402
from megatron.core.rerun_state_machine import RerunDataIterator  # noqa: E402
from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper  # noqa: E402
from megatron.core.utils import get_model_config  # noqa: E402
from megatron.training import get_args, get_timers  # noqa: E402
from megatron.training.arguments import (  # noqa: E402
    core_transformer_config_from_args,
    parse_args,
    validate_args,
)
from megatron.training.global_vars import set_global_variables  # noqa: E402
from megatron.training.initialize import initialize_megatron  # noqa: E402
from megatron.training import training as mtraining  # noqa: E402

cpu_standins.install_megatron()


def init_megatron(argv):
    """pretrain()'s argument and initialization steps for an explicit argv."""
    sys.argv = ["pretrain_gpt.py"] + list(argv)
    args = parse_args()
    validate_args(args, {})
    set_global_variables(args)
    initialize_megatron(allow_no_cuda=True)
    mtraining.set_jit_fusion_options(tp_size=args.tensor_model_parallel_size)
    return get_args()


def model_provider(pre_process=True, post_process=True, vp_stage=None, config=None,
                   pg_collection=None):
    """gpt_builders.gpt_builder for the local (non-TE) spec."""
    args = get_args()
    if config is None:
        config = core_transformer_config_from_args(args)
    if args.num_experts:
        layer_spec = get_gpt_decoder_block_spec(
            config, use_transformer_engine=False, normalization=args.normalization,
            qk_l2_norm=args.qk_l2_norm, vp_stage=vp_stage)
    else:
        layer_spec = get_gpt_layer_local_spec(
            config.num_moe_experts, config.moe_grouped_gemm, config.qk_layernorm,
            config.multi_latent_attention, config.experimental_attention_variant,
            normalization=config.normalization)
    mtp_block_spec = None
    if args.mtp_num_layers is not None:
        decoder_layer_specs = get_gpt_decoder_layer_specs(
            config, use_transformer_engine=False, normalization=args.normalization,
            qk_l2_norm=args.qk_l2_norm, vp_stage=vp_stage)
        mtp_block_spec = get_gpt_mtp_block_spec(
            config, decoder_layer_specs[-1], use_transformer_engine=False, vp_stage=vp_stage)
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        fp16_lm_cross_entropy=args.fp16_lm_cross_entropy,
        parallel_output=True,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent,
        rotary_base=args.rotary_base,
        rope_scaling=args.use_rope_scaling,
        mtp_block_spec=mtp_block_spec,
        vp_stage=vp_stage,
        pg_collection=pg_collection,
    )


def loss_func(loss_mask, output_tensor, model=None):
    """pretrain_gpt.loss_func: sum(loss * mask), the token count, and the 'lm loss' report."""
    losses = output_tensor.view(-1).float()
    loss_mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * loss_mask)
    num_tokens = loss_mask.sum().clone().detach().to(torch.int)
    report = {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}
    return loss, num_tokens, report


def to_torch_batch(batch):
    return {k: torch.from_numpy(np.asarray(v)).to(torch.int64) for k, v in batch.items()}


def forward_step(data_iterator, model, return_schedule_plan=False):
    """pretrain_gpt.forward_step for a batch dict without packed sequences; the causal mask is
    the attention's own (attention_mask None, as with --no-create-attention-mask-in-dataloader)."""
    batch = next(data_iterator)
    tokens, labels = batch["tokens"], batch["labels"]
    loss_mask, position_ids = batch["loss_mask"].float(), batch["position_ids"]
    output_tensor = model(tokens, position_ids, None, labels=labels, loss_mask=loss_mask)
    return output_tensor, partial(loss_func, loss_mask, model=model)


class Trainer:
    """Megatron's model, optimizer and scheduler from setup_model_and_optimizer, trained with
    training.train_step the way training.train() calls it."""

    def __init__(self):
        args = get_args()
        self.model, self.optimizer, self.scheduler = mtraining.setup_model_and_optimizer(
            ModelType.encoder_or_decoder, model_provider)
        self.config = get_model_config(self.model[0])
        self.config.grad_scale_func = self.optimizer.scale_loss
        self.config.timers = get_timers()
        if self.config.finalize_model_grads_func is None:
            self.config.finalize_model_grads_func = mtraining.finalize_model_grads
        self.forward_backward_func = get_forward_backward_func()
        self.iteration = args.iteration
        self.flops = args.num_floating_point_operations_so_far
        # train() starts this timer; save_checkpoint_and_time stops and restarts it.
        interval_timer = get_timers()("interval-time", log_level=0)
        if not getattr(interval_timer, "_started", False):
            interval_timer.start(barrier=False)

    def train_step(self, micro_batches):
        """One iteration on the given micro-batches; returns Megatron's reported losses."""
        args = get_args()
        for chunk in self.model:
            chunk.train()
        args.curr_iteration = self.iteration
        # build_train_valid_test_data_iterators wraps the data iterator the same way.
        iterator = RerunDataIterator(iter([to_torch_batch(b) for b in micro_batches]))
        loss_dict, skipped, *_ = mtraining.train_step(
            forward_step, iterator, self.model, self.optimizer, self.scheduler, self.config,
            self.forward_backward_func, iteration=self.iteration)
        assert not skipped, "Megatron skipped the iteration"
        self.iteration += 1
        args.iteration = self.iteration
        batch_size = args.micro_batch_size * get_num_microbatches() * args.data_parallel_size
        args.consumed_train_samples += batch_size
        self.flops += mtraining.num_floating_point_operations(args, batch_size)
        losses = {k: float(v) for k, v in loss_dict.items()}
        losses.update(auxiliary_losses(self.iteration))
        return losses

    def save(self):
        mtraining.save_checkpoint_and_time(
            self.iteration, self.model, self.optimizer, self.scheduler, self.flops, None)

    @torch.no_grad()
    def check_loss(self, batch):
        """Forward loss of the current model on one micro-batch in eval mode:
        sum(loss * mask) / sum(mask), as pretrain_gpt's loss_func reports it."""
        for chunk in self.model:
            chunk.eval()
        b = to_torch_batch(batch)
        out = self.model[0](b["tokens"], b["position_ids"], None, labels=b["labels"],
                            loss_mask=b["loss_mask"].float())
        loss, num_tokens, _ = loss_func(b["loss_mask"].float(), out)
        for chunk in self.model:
            chunk.train()
        clear_auxiliary_trackers()
        return float(loss / num_tokens)


def auxiliary_losses(iteration):
    """The MoE aux losses and MTP losses as training_log reports them (Megatron's own reporting
    with loss_scale 1/num_microbatches, into a total_loss_dict)."""
    args = get_args()
    total = {}
    if args.num_experts is not None:
        from megatron.core.transformer.moe.moe_utils import get_moe_metrics_tracker

        track_names = []
        if "aux_loss" in args.moe_router_load_balancing_type:
            track_names.append("load_balancing_loss")
        if args.moe_z_loss_coeff is not None:
            track_names.append("z_loss")
        get_moe_metrics_tracker().report(
            loss_scale=1 / get_num_microbatches(), iteration=iteration, writer=None,
            wandb_writer=None, per_layer_logging=False, force_initialize=True,
            track_names=track_names, num_layers=args.num_layers,
            moe_layer_freq=args.moe_layer_freq, mtp_num_layers=args.mtp_num_layers,
            pg_collection=None, total_loss_dict=total)
    if args.mtp_num_layers is not None:
        MTPLossLoggingHelper.track_mtp_metrics(
            1 / get_num_microbatches(), iteration, None, None, total)
    return {k: float(v) for k, v in total.items()}


def clear_auxiliary_trackers():
    args = get_args()
    if args.num_experts is not None:
        from megatron.core.transformer.moe.moe_utils import clear_aux_losses_tracker

        clear_aux_losses_tracker()
    if args.mtp_num_layers is not None:
        MTPLossLoggingHelper.clean_metrics_in_tracker()


def ddp_param_layout(model):
    """The DDP buffers' bucket layout: per buffer and bucket, each parameter's name (from
    model.named_parameters()), shape and [start, end) in the bucket's flat buffer."""
    names = {}
    for chunk in model:
        for name, p in chunk.module.named_parameters():
            names[id(p)] = name
    layout = []
    for chunk in model:
        buffers = list(chunk.buffers) + list(getattr(chunk, "expert_parallel_buffers", []))
        for buffer_index, buffer in enumerate(buffers):
            entry = {
                "buffer_index": buffer_index,
                "is_expert_parallel": buffer in getattr(chunk, "expert_parallel_buffers", []),
                "param_dtype": str(buffer.param_dtype),
                "grad_dtype": str(buffer.grad_dtype),
                "numel": int(buffer.numel),
                "numel_unpadded": int(buffer.numel_unpadded),
                "buckets": [],
            }
            for bucket in buffer.buckets:
                params = []
                for p in bucket.params_list:
                    start, end, _ = buffer.param_index_map[p]
                    params.append({
                        "name": names[id(p)],
                        "shape": list(p.shape),
                        "start_in_buffer": int(start),
                        "end_in_buffer": int(end),
                        "start_in_bucket": int(start - bucket.offset),
                        "end_in_bucket": int(end - bucket.offset),
                    })
                entry["buckets"].append({
                    "bucket_id": int(bucket.bucket_id),
                    "offset_in_buffer": int(bucket.offset),
                    "numel": int(bucket.grad_data.numel()),
                    "numel_unpadded": int(bucket.numel_unpadded),
                    "padding_at_end": int(bucket.grad_data.numel() - bucket.numel_unpadded),
                    "params_in_bucket_order": params,
                })
            layout.append(entry)
    return layout

