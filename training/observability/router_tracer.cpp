// The MoE router tracer (see router_tracer.h).
// Reference: megatron/core/transformer/moe/router_trace.py (make_hook, _flush, advance_step).
#include "training/observability/router_tracer.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/formats/safetensors.h"
#include "core/half.h"
#include "core/logging.h"
#include "core/phase_timer.h"
#include "models/layers/moe/router.h"
#include "models/parameter_names.h"

namespace strata {

namespace {

constexpr size_t kAutoFlushBytes = size_t{64} << 20;  // flush mid-step past this (whole records only)

// The module identity Megatron parses from the hook's module name.
struct RouterKey {
  std::string block = "decoder";
  std::optional<int64_t> mtp_idx;
  int64_t layer = 0;
};

std::optional<int64_t> leading_int(std::string_view s) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  return v;
}

// "decoder.layers.<i>.…" -> (decoder, -, i); "mtp.layers.<h>.mtp_model_layer.layers.<j>.…" (a
// hybrid model's nested stack) -> (mtp, h, j); any other "mtp.layers.<h>.…" -> (mtp, h, 0).
RouterKey parse_owner(std::string_view owner) {
  RouterKey k;
  constexpr std::string_view dec = "decoder.layers.", mtp = "mtp.layers.", stack = ".mtp_model_layer.layers.";
  if (owner.substr(0, dec.size()) == dec) {
    const auto i = leading_int(owner.substr(dec.size()));
    STRATA_CHECK(i.has_value(), "router tracer: cannot read the layer of '", owner, "'");
    k.layer = *i;
  } else if (owner.substr(0, mtp.size()) == mtp) {
    k.block = "mtp";
    k.mtp_idx = leading_int(owner.substr(mtp.size()));
    STRATA_CHECK(k.mtp_idx.has_value(), "router tracer: cannot read the MTP head of '", owner, "'");
    if (const size_t at = owner.find(stack); at != std::string_view::npos) {
      const auto j = leading_int(owner.substr(at + stack.size()));
      STRATA_CHECK(j.has_value(), "router tracer: cannot read the MTP inner layer of '", owner, "'");
      k.layer = *j;
    }
  } else {
    STRATA_THROW("router tracer: unexpected router owner '", owner, "'");
  }
  return k;
}

std::string state_prefix(const RouterKey& k) {
  return k.block + "." + (k.mtp_idx ? std::to_string(*k.mtp_idx) : std::string()) + "." + std::to_string(k.layer);
}

void put_int(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
void put_key(std::string& out, const char* key) {
  out += ", \"";
  out += key;
  out += "\": ";
}
void put_shape(std::string& out, int64_t a, int64_t b) {
  out += '[';
  put_int(out, a);
  out += ", ";
  put_int(out, b);
  out += ']';
}

// [s, b, n] (or [T, n]) -> its bf16 bytes as [T, n]; returns n.
int64_t append_bf16(const Tensor& t, std::string& out) {
  const size_t at = out.size();
  if (t.device().is_cpu() && t.dtype() == DType::F32 && t.is_contiguous()) {  // the common case, one pass
    const float* f = t.data<float>();
    out.resize(at + 2 * static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) {
      const uint16_t b = bfloat16(f[i]).bits;
      std::memcpy(&out[at + 2 * static_cast<size_t>(i)], &b, 2);
    }
  } else {
    const Tensor h = t.to(DType::BF16).to(Device::cpu()).contiguous();
    out.append(static_cast<const char*>(h.data_ptr()), h.nbytes());
  }
  return t.size(t.dim() - 1);
}

}  // namespace

// One router forward between its router_input (first) and router_top_kept (last) observations.
struct RouterTracer::Pending {
  std::string owner;
  std::string hs, logits;  // bf16 bytes
  int64_t hidden = 0, experts = 0;
  std::vector<int64_t> indices;  // [T, k]
  int64_t tokens = 0, topk = 0;
  bool logits_from_input = false;  // the logits were recomputed from the pre-jitter input
};

RouterTracerOptions RouterTracerOptions::from_config(const ResolvedConfig& cfg, int rank) {
  const LoggingConfig& l = cfg.logging;
  STRATA_CHECK(l.moe_routing_trace_path.has_value(), "router tracer: logging.moe_routing_trace_path is not set");
  RouterTracerOptions o;
  o.dir = *l.moe_routing_trace_path;
  o.rank = rank;
  o.max_training_iters = l.moe_routing_trace_max_training_iters.value_or(*cfg.training->train_iters);
  o.max_inference_steps = l.moe_routing_trace_max_inference_steps.value_or(1000000000);
  o.capture_logits = l.moe_routing_trace_capture_logits;
  o.capture_hidden_states = l.moe_routing_trace_capture_hidden_states;
  o.dump_weights = l.moe_routing_trace_dump_weights;
  return o;
}

RouterTracer::RouterTracer(RouterTracerOptions options, std::vector<MoeRouterRef> routers,
                           std::map<std::string, std::string> weight_names)
    : o_(std::move(options)), weight_names_(std::move(weight_names)), pending_(std::make_unique<Pending>()) {
  for (const MoeRouterRef& r : routers) routers_[r.router->owner()] = r.router;
  std::error_code ec;
  std::filesystem::create_directories(o_.dir, ec);
  STRATA_CHECK_KIND(ErrorKind::Io, !ec, "logging.moe_routing_trace_path: cannot create '", o_.dir, "': ", ec.message());
  const std::string r = std::to_string(o_.rank);
  jsonl_path_ = o_.dir + "/router_trace_rank" + r + ".jsonl";
  jsonl_ = std::make_unique<formats::AppendFile>(jsonl_path_, /*append=*/false);
  if (o_.capture_hidden_states)
    hs_ = std::make_unique<formats::AppendFile>(o_.dir + "/hidden_states_rank" + r + ".bin", false);
  if (o_.capture_logits) logits_ = std::make_unique<formats::AppendFile>(o_.dir + "/logits_rank" + r + ".bin", false);
}

RouterTracer::~RouterTracer() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::error("router tracer: {}", e.what());
  }
}

SourceKinds RouterTracer::kinds_for(const ObservationContext& c) {
  if (detached_) return {};
  if (c.phase == ObservationPhase::Train && traced_train_ >= o_.max_training_iters) detached_ = true;
  if (c.phase == ObservationPhase::Generate && traced_generate_ >= o_.max_inference_steps) detached_ = true;
  if (detached_) return {};
  SourceKinds k{SourceKind::RouterTopIndices, SourceKind::RouterTopKept};
  if (o_.capture_hidden_states) k = k | SourceKinds{SourceKind::RouterInput};
  if (o_.capture_logits) k = k | SourceKinds{SourceKind::RouterInput, SourceKind::RouterLogits};
  return k;
}

void RouterTracer::on_tensor(const Observation& o) {
  phase_timer::Scope timed("forward/router_trace");  // `strata bench train --phases`
  Pending& p = *pending_;
  if (o.kind == SourceKind::RouterInput || p.owner != o.owner) {  // a forward's first site
    p = Pending{};
    p.owner = o.owner;
  }
  switch (o.kind) {
    case SourceKind::RouterInput:
      if (o_.capture_hidden_states) p.hidden = append_bf16(o.tensor, p.hs);
      if (o_.capture_logits) p.logits_from_input = logits_from_input(o, p);
      break;
    case SourceKind::RouterLogits:
      if (!p.logits_from_input) p.experts = append_bf16(o.tensor, p.logits);
      break;
    case SourceKind::RouterTopIndices: {
      const Tensor idx = o.tensor.to(Device::cpu()).contiguous();
      p.tokens = idx.size(0);
      p.topk = idx.size(1);
      const int64_t* d = idx.data<int64_t>();
      p.indices.assign(d, d + idx.numel());
      break;
    }
    case SourceKind::RouterTopKept:  // the last site: the record is complete
      emit(o);
      break;
    default:
      break;
  }
}

// Under moe_input_jitter_eps the router gates a jittered copy of its input; the hidden-state
// sidecar holds the input before the jitter. As Megatron's tracer (it gates the hook's pre-jitter
// input again, under no_grad), the logits sidecar is then the gating of that same input, so the
// pair is consistent: logits = hidden · Wᵀ in the router dtype. Without jitter the observed
// router_logits are that product already and are taken as they are.
bool RouterTracer::logits_from_input(const Observation& input, Pending& p) {
  const auto it = routers_.find(std::string(p.owner));
  if (it == routers_.end() || it->second->config()->moe_input_jitter_eps.value_or(0.0) <= 0) return false;
  const layers::moe::TopKRouter& r = *it->second;
  const Tensor x = input.tensor.contiguous();
  const Tensor rows = x.reshape({x.numel() / x.size(-1), x.size(-1)}).to(r.router_dtype(x.dtype()));
  p.experts = append_bf16(r.gating(rows), p.logits);
  return true;
}

void RouterTracer::emit(const Observation& kept) {
  Pending& p = *pending_;
  STRATA_INTERNAL_ASSERT(p.owner == kept.owner, "router tracer: router_top_kept of ", kept.owner,
                         " without its router_top_indices");
  const ObservationContext& c = observation_context();
  const RouterKey key = parse_owner(p.owner);
  const int64_t T = p.tokens, k = p.topk;
  std::string& s = jsonl_buf_;
  s += "{\"step\": ";
  put_int(s, c.phase == ObservationPhase::Generate ? traced_generate_ : c.iteration);
  s += ", \"stage\": \"pre_dispatch\", \"block\": \"" + key.block + "\"";
  put_key(s, "layer"), put_int(s, key.layer);
  put_key(s, "rank"), put_int(s, o_.rank);
  put_key(s, "num_tokens"), put_int(s, T);
  put_key(s, "topk"), put_int(s, k);
  if (key.mtp_idx) put_key(s, "mtp_idx"), put_int(s, *key.mtp_idx);
  if (hs_ && !p.hs.empty()) {
    put_key(s, "hs_offset"), put_int(s, hs_offset_);
    put_key(s, "hs_bytes"), put_int(s, static_cast<int64_t>(p.hs.size()));
    put_key(s, "hs_shape"), put_shape(s, T, p.hidden);
    hs_offset_ += static_cast<int64_t>(p.hs.size());
    hs_buf_ += p.hs;
  }
  if (logits_ && !p.logits.empty()) {
    put_key(s, "logit_offset"), put_int(s, logits_offset_);
    put_key(s, "logit_bytes"), put_int(s, static_cast<int64_t>(p.logits.size()));
    put_key(s, "logit_shape"), put_shape(s, T, p.experts);
    logits_offset_ += static_cast<int64_t>(p.logits.size());
    logits_buf_ += p.logits;
  }
  put_key(s, "top_indices");
  s += '[';
  for (int64_t t = 0; t < T; ++t) {
    s += t ? ", [" : "[";
    for (int64_t j = 0; j < k; ++j) {
      if (j) s += ", ";
      put_int(s, p.indices[static_cast<size_t>(t * k + j)]);
    }
    s += ']';
  }
  s += ']';
  put_key(s, "micro_batch"), put_int(s, c.micro_batch);
  if (c.phase != ObservationPhase::Generate) put_key(s, "phase"), s += '"', s += observation_phase_name(c.phase), s += '"';
  const Tensor kt = kept.tensor.to(Device::cpu()).contiguous();
  const uint8_t* kd = kt.data<uint8_t>();
  bool any = false;
  for (int64_t i = 0; i < T * k; ++i) {
    if (kd[i]) continue;
    s += any ? ", [" : ", \"dropped\": [[";
    any = true;
    put_int(s, i / k);
    s += ", ";
    put_int(s, p.indices[static_cast<size_t>(i)]);
    s += ']';
  }
  if (any) s += ']';
  s += "}\n";
  if (o_.dump_weights && !weights_.count(state_prefix(key) + ".weight")) snapshot_weights(p.owner);
  *pending_ = Pending{};
  if (jsonl_buf_.size() + hs_buf_.size() + logits_buf_.size() > kAutoFlushBytes) flush();
}

// Megatron's RouterTracer._record: the first forward of each router (decoder and MTP, keyed
// (block, mtp_idx, layer)) records its weights once.
void RouterTracer::snapshot_weights(const std::string& owner) {
  const auto it = routers_.find(owner);
  STRATA_CHECK(it != routers_.end(), "router tracer: no router '", owner, "' to dump the weights of");
  const layers::moe::TopKRouter& r = *it->second;
  const std::string p = state_prefix(parse_owner(owner));
  weights_[p + ".weight"] = r.weight.value.to(DType::F32).to(Device::cpu()).clone();
  if (r.config()->moe_router_enable_expert_bias)
    weights_[p + ".expert_bias"] = r.expert_bias.value.to(DType::F32).to(Device::cpu()).clone();
  weight_meta_[p + ".score_function"] = to_string(r.config()->moe_router_score_function);
  weight_meta_[p + ".topk"] = std::to_string(r.config()->moe_router_topk);
  if (const auto name = weight_names_.find(owner); name != weight_names_.end()) weight_meta_[p + ".parameter"] = name->second;
  if (r.config()->moe_router_num_groups) {  // group-limited routing (what a predictor needs to replay it)
    weight_meta_[p + ".num_groups"] = std::to_string(*r.config()->moe_router_num_groups);
    weight_meta_[p + ".group_topk"] = std::to_string(r.config()->moe_router_group_topk.value_or(0));
  }
  weights_dirty_ = true;
}

void RouterTracer::flush() {
  // Sidecar bytes first, so every written line points at bytes already in their file.
  if (hs_ && !hs_buf_.empty()) hs_->append(hs_buf_.data(), hs_buf_.size());
  if (logits_ && !logits_buf_.empty()) logits_->append(logits_buf_.data(), logits_buf_.size());
  if (!jsonl_buf_.empty()) jsonl_->append(jsonl_buf_.data(), jsonl_buf_.size());
  hs_buf_.clear();
  logits_buf_.clear();
  jsonl_buf_.clear();
  if (weights_dirty_) write_weights();
}

void RouterTracer::write_weights() {
  formats::write_safetensors(o_.dir + "/router_state_rank" + std::to_string(o_.rank) + ".safetensors", weights_,
                             weight_meta_);
  weights_dirty_ = false;
}

void RouterTracer::end_step(const ObservationContext& c) {
  try {  // runs in RunObservers::Step's destructor: a failed write stops the trace, not the run
    phase_timer::Scope timed("router_trace/write");
    flush();
  } catch (const std::exception& e) {
    log::error("router tracer: {}; tracing stopped", e.what());
    jsonl_buf_.clear(), hs_buf_.clear(), logits_buf_.clear();
    detached_ = true;
  }
  if (c.phase == ObservationPhase::Train) ++traced_train_;
  if (c.phase == ObservationPhase::Generate) ++traced_generate_;
  if ((c.phase == ObservationPhase::Train && traced_train_ >= o_.max_training_iters) ||
      (c.phase == ObservationPhase::Generate && traced_generate_ >= o_.max_inference_steps))
    detached_ = true;
}

void RouterTracer::finish() {
  if (jsonl_) flush();
}

std::unique_ptr<RouterTracer> make_router_tracer(const ResolvedConfig& cfg, const std::vector<LanguageModel*>& chunks,
                                                 int rank, int ep_rank, int ep_size) {
  if (!cfg.logging->moe_routing_trace_path) return nullptr;
  const CanonicalParameterNameMap names(chunks, ep_rank, ep_size);
  std::vector<MoeRouterRef> routers;
  std::map<std::string, std::string> weight_names;
  for (LanguageModel* c : chunks)
    for (const MoeRouterRef& r : c->moe_routers()) {
      routers.push_back(r);
      weight_names[r.router->owner()] = names.name_of(&r.router->weight);
    }
  return std::make_unique<RouterTracer>(RouterTracerOptions::from_config(cfg, rank), std::move(routers),
                                        std::move(weight_names));
}

}  // namespace strata
