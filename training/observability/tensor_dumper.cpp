// The tensor dumper (see tensor_dumper.h).
#include "training/observability/tensor_dumper.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/formats/safetensors.h"
#include "core/logging.h"
#include "training/config/config.h"
#include "training/observability/tensor_dump_sites.h"

namespace strata {

namespace fs = std::filesystem;

TensorDumper::TensorDumper(TensorDumpOptions o) : opt_(std::move(o)), due_(opt_.iterations.begin(), opt_.iterations.end()) {}

std::unique_ptr<TensorDumper> TensorDumper::from_config(const ResolvedConfig& c, int rank) {
  const LoggingConfig& l = c.logging;
  if (l.tensor_dump_sites.empty()) return nullptr;
  TensorDumpOptions o;
  o.patterns = l.tensor_dump_sites;
  o.iterations = l.tensor_dump_iters;
  o.kinds = site_kinds(o.patterns, c.model);
  o.dir = tensor_dump_dir(c);
  o.rank = rank;
  o.chunk_keys = c.parallel->virtual_pipeline_model_parallel_size.has_value();
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  STRATA_CHECK_KIND(ErrorKind::Io, !ec && fs::is_directory(o.dir), "logging.tensor_dump_dir: cannot create '", o.dir,
                    "'", ec ? ": " + ec.message() : std::string());
  return std::make_unique<TensorDumper>(std::move(o));
}

SourceKinds TensorDumper::kinds_for(const ObservationContext& c) {
  if (c.phase == ObservationPhase::Generate || !due_.count(c.iteration)) return {};
  if (c.iteration != current_) {  // a new iteration: the previous one's file is complete
    tensors_.clear();
    metadata_.clear();
    current_ = c.iteration;
    eval_offset_ = 0;
  }
  eval_forwards_ = 0;
  return opt_.kinds;
}

std::string TensorDumper::key_for(const Observation& o, const ObservationContext& c) const {
  const bool eval = c.phase == ObservationPhase::Eval;
  std::string key = std::string(eval ? "eval/" : "") + std::string(o.owner) + "." + std::string(o.name) + "/mb" +
                    std::to_string(eval ? eval_offset_ + c.micro_batch : c.micro_batch);
  if (opt_.chunk_keys) key += "/chunk" + std::to_string(c.model_chunk);
  return key;
}

namespace {
nlohmann::json dim(const std::optional<int>& d) {
  return d ? nlohmann::json(*d) : nlohmann::json(nullptr);
}
bool matches(const std::vector<std::string>& patterns, const std::string& site) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return glob_match(p, site); });
}
}  // namespace

void TensorDumper::on_tensor(const Observation& o) {
  const std::string site = std::string(o.owner) + "." + std::string(o.name);
  if (!matches(opt_.patterns, site)) return;
  const ObservationContext& c = observation_context();
  if (c.phase == ObservationPhase::Eval) eval_forwards_ = std::max(eval_forwards_, c.micro_batch + 1);
  std::string key = key_for(o, c);
  if (tensors_.count(key)) {  // a site seen twice in one forward (not expected): keep both
    int k = 2;
    while (tensors_.count(key + "/repeat" + std::to_string(k))) ++k;
    key += "/repeat" + std::to_string(k);
  }
  Tensor copy = o.tensor.clone();  // valid during the call only
  if (!copy.device().is_cpu()) copy = copy.to(Device::cpu());
  tensors_.emplace(key, std::move(copy));
  nlohmann::json m = {{"owner", o.owner},
                      {"name", o.name},
                      {"kind", source_kind_name(o.kind)},
                      {"tp_shard_dim", dim(o.tp_shard_dim)},
                      {"sequence_dim", dim(o.sequence_dim)},
                      {"batch_dim", dim(o.batch_dim)},
                      {"phase", observation_phase_name(c.phase)},
                      {"micro_batch", c.micro_batch},
                      {"model_chunk", c.model_chunk}};
  metadata_[key] = m.dump();
}

void TensorDumper::end_step(const ObservationContext& c) {
  if (c.phase == ObservationPhase::Eval) eval_offset_ += eval_forwards_;
  eval_forwards_ = 0;
  std::map<std::string, std::string> meta = metadata_;
  meta["format"] = "strata.tensor_dump.v1";
  meta["iteration"] = std::to_string(c.iteration);
  meta["rank"] = std::to_string(opt_.rank);
  const std::string path = tensor_dump_path(opt_.dir, c.iteration, opt_.rank);
  fs::create_directories(fs::path(path).parent_path());
  formats::write_safetensors(path, tensors_, meta);  // atomic (tmp + rename): replaces an old file
  if (written_.empty() || written_.back() != path) written_.push_back(path);
  log::debug("tensor dump: {} tensors to {}", tensors_.size(), path);
  if (c.phase == ObservationPhase::Train) finish();  // the iteration is complete (its evaluation runs first)
}

void TensorDumper::finish() {
  tensors_.clear();
  metadata_.clear();
  current_ = -1;
}

}  // namespace strata
