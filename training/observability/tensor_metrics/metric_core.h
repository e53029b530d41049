// The tensor-metric framework: obtaining a tensor is separate from computing a metric of it. A
// metric compacts every observed tensor at once (prepare(): local, nothing kept past its site),
// turns the step's contributions into results or staged collective requests (start(), resume()),
// and the executor batches every pending stage into one collective per (axis, collective, dtype).
// Reference: Megatron-LM megatron/training/tensor_metrics/core.py (PR #6647).
// Details (sources, placements per axis, reductions, accumulation): docs/metrics.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/process_group.h"

namespace strata::tensor_metrics {

// Strata's process groups: Megatron's tp / expert_tp / ep / dp / expert_dp plus pp (which the
// reference lacks) and cp apart from dp (so a sequence's shards can be merged); dp_cp is the dense
// optimizer's group.
enum class Axis : uint8_t { TP, CP, DP, DpCp, PP, ExpertTP, EP, ExpertDP };
inline constexpr int kNumAxes = 8;
const char* axis_name(Axis a);  // "tp", "cp", "dp", "dp_cp", "pp", "expert_tp", "ep", "expert_dp"

// How a value relates to the other ranks of one axis: Replica (identical everywhere), Shard(dim |
// none) (split along a local dim, uneven or empty shards allowed; none: a data population),
// FlatShard (a contiguous range of the row-major flattening: the distributed optimizer's owned
// range), Owned(rank) (one rank holds it, the others a placeholder) and Strata's Partial (additive
// parts of one logical tensor: a sequence's router-diagnostic sums over its sequence shards).
struct Placement {
  enum class Kind : uint8_t { Replica, Shard, FlatShard, Owned, Partial };
  Kind kind = Kind::Replica;
  std::optional<int> dim;              // Shard: the local dimension split (none: a data population)
  std::vector<int64_t> logical_shape;  // FlatShard: the logical tensor's shape
  int64_t start = 0, end = 0;          // FlatShard: [start, end) of its row-major flattening
  int owner = 0;                       // Owned: the holder's rank on the axis

  static Placement replica() { return {}; }
  static Placement shard(std::optional<int> dim) { return {Kind::Shard, dim, {}, 0, 0, 0}; }
  static Placement flat_shard(std::vector<int64_t> logical_shape, int64_t start, int64_t end);  // checks the range
  static Placement owned(int rank) { return {Kind::Owned, std::nullopt, {}, 0, 0, rank}; }
  static Placement partial() { return {Kind::Partial, std::nullopt, {}, 0, 0, 0}; }
  bool is_split() const { return kind == Kind::Shard || kind == Kind::FlatShard || kind == Kind::Partial; }
  bool operator==(const Placement&) const = default;
};
std::string placement_text(const Placement& p);  // "Replica", "Shard(0)", "FlatShard([4,8],0,16)", "Owned(1)", …

struct RankRelation {
  Axis axis;
  Placement placement;
  bool operator==(const RankRelation&) const = default;
};

struct MetricSite {
  std::string name;  // forward: "<owner>.<local name>"; optimizer: the canonical parameter name
  std::string kind;  // a source kind name (core/observe.h), "parameter" or "wgrad"
  bool operator==(const MetricSite&) const = default;
};

// An observed value: its sites (e.g. "decoder.layers.3.residual_contribution" of kind
// "residual_contribution"; parameters "<canonical name>" of kind "parameter" or "wgrad"), its
// relations (each axis at most once), placeholder (a neutral slot for a value another rank of an
// Owned axis holds; not an empty shard); occurrence and order give a rank-independent ordering.
struct MetricTensor {
  Tensor tensor;
  std::vector<MetricSite> sites;
  std::vector<RankRelation> relations;
  bool placeholder = false;
  int64_t occurrence = 0;  // the n-th observation of these sites in the step
  int64_t order = 0;       // optimizer sources: position in backward order (0 = first reduced)

  const Placement* relation(Axis a) const;  // null: the axis is not related (size 1)
  MetricTensor with_tensor(Tensor t) const;
  // The placement on `a` replaced (or added); a placeholder stops being one once no Owned remains.
  MetricTensor with_placement(Axis a, const Placement& p) const;
  const MetricSite& site() const { return sites.front(); }
};

// The layer label of a site name: the innermost `layers.N` prefix, else nullopt.
std::optional<std::string> layer_label(const std::string& site_name);

struct Collective {
  enum class Kind : uint8_t { AllReduce, AllGather };
  Kind kind = Kind::AllReduce;
  ReduceOp op = ReduceOp::Sum;  // AllReduce: Sum, Max or Min
  // AllGather (equal sizes over the axis): none stacks along a new leading dim; else concatenates
  // along `dim`.
  std::optional<int> dim;
  static Collective all_reduce(ReduceOp op) { return {Kind::AllReduce, op, std::nullopt}; }
  static Collective all_gather(std::optional<int> dim = std::nullopt) { return {Kind::AllGather, ReduceOp::Sum, dim}; }
};

struct CollectiveRequest {
  MetricTensor value;
  Axis axis;
  Collective collective;
};

struct MetricResult {
  double value = 0.0;
  std::string label = "global";
};

struct CollectiveStage;
// What start() / resume() return: stages still waiting on collectives, and finished results.
struct MetricProgress {
  std::vector<CollectiveStage> stages;
  std::vector<MetricResult> results;
  MetricProgress& add(MetricProgress other);  // appends the other's stages and results
};
struct CollectiveStage {
  std::vector<CollectiveRequest> requests;  // non-empty
  // Receives the completed values in request order (the reduced axis now Replica).
  std::function<MetricProgress(std::vector<MetricTensor> completed)> resume;
};

// Every rank of a group must issue the same requests on it, in the same order, with the same
// sizes: the executor fixes the order; a metric decides only from sites, relations and shapes,
// never from values.
class TensorMetric {
 public:
  virtual ~TensorMetric() = default;
  virtual std::string name() const = 0;
  // The site kinds this metric reads (non-empty). Observation kinds must be emitted by some site
  // of the model (its manifest, models/model_manifest.h): the config check refuses the metric else.
  virtual std::vector<std::string> source_kinds() const = 0;
  // True when the metric reads the residual sites as mHC streams [s, b, n, h] (n > 1).
  virtual bool needs_hyper_connections() const { return false; }
  // Cheap, deterministic, side-effect free. Default: site.kind in source_kinds().
  virtual bool accepts(const MetricSite& site) const;
  // Local compaction of observed values (no communication; may drop values). The results must be
  // host tensors that do not alias the inputs. Default: host copies in the accumulation dtype.
  virtual std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const;
  // All prepared contributions of the step (placeholders included) → results or stages.
  virtual MetricProgress start(std::vector<MetricTensor> prepared) const = 0;
};

// The dtype contributions are accumulated in: f64 stays f64; everything else f32.
DType accumulation_dtype(DType t);
// A host copy of t in its accumulation dtype (contiguous, not aliasing t).
Tensor host_accumulation_copy(const Tensor& t);

// Runs the collectives of one axis. ProcessGroupRunner binds axes to process groups; tests bind
// them to in-process ranks.
class CollectiveRunner {
 public:
  virtual ~CollectiveRunner() = default;
  virtual int size(Axis a) const = 0;
  virtual int rank(Axis a) const = 0;
  // t: a contiguous host tensor, reduced in place.
  virtual void all_reduce(Axis a, Tensor& t, ReduceOp op) = 0;
  // in: [n] contiguous host; returns [size · n] (rank-major).
  virtual Tensor all_gather(Axis a, const Tensor& in) = 0;
  // Every rank's bytes, in rank order (descriptor exchange of synchronize_owned).
  virtual std::vector<std::string> all_gather_bytes(Axis a, const std::string& bytes) = 0;
};

// Axes bound to this rank's groups (an unbound axis has size 1).
struct AxisGroups {
  std::optional<ProcessGroup> groups[kNumAxes];
  AxisGroups& bind(Axis a, const ProcessGroup& g) {
    groups[static_cast<int>(a)] = g;
    return *this;
  }
  static AxisGroups from(const ParallelGroups& g);  // every axis bound to its group
};

class ProcessGroupRunner : public CollectiveRunner {
 public:
  explicit ProcessGroupRunner(AxisGroups groups) : groups_(std::move(groups)) {}
  int size(Axis a) const override;
  int rank(Axis a) const override;
  void all_reduce(Axis a, Tensor& t, ReduceOp op) override;
  Tensor all_gather(Axis a, const Tensor& in) override;
  std::vector<std::string> all_gather_bytes(Axis a, const std::string& bytes) override;

 private:
  const ProcessGroup* group(Axis a) const;
  AxisGroups groups_;
};

class MetricExecutor {
 public:
  explicit MetricExecutor(CollectiveRunner& runner) : runner_(runner) {}

  // Keeps the values whose every site the metric accepts, prepares them (local), checks the result
  // is host memory. Values must not be kept by the caller past this call.
  std::vector<MetricTensor> prepare(const TensorMetric& metric, std::vector<MetricTensor> values) const;

  // Makes every rank of each Owned axis (ep, then pp) hold the same ordered list for every metric
  // (how forward sites on every pipeline stage and experts on every EP rank are reduced):
  // the values of other ranks become placeholders (zeros of the holder's prepared shape and dtype,
  // its relations), then every list is sorted by (site names, occurrence, order). One all-gather
  // of descriptors per axis with size > 1 and any Owned relation anywhere (decided locally from
  // the relations and configuration: `owned_axes` lists the axes to synchronise, the same on
  // every rank).
  void synchronize_owned(std::vector<std::vector<MetricTensor>>& per_metric, const std::vector<Axis>& owned_axes);

  // start() every metric on its values, then runs every pending stage of every metric together:
  // per round, all requests grouped by (axis, collective, op, dtype) in a fixed order, one
  // collective per group (values flattened and concatenated), resume() per stage; until no stage
  // remains. Returns each metric's results in start/resume order.
  std::vector<std::vector<MetricResult>> run(const std::vector<const TensorMetric*>& metrics,
                                             std::vector<std::vector<MetricTensor>> prepared);

  int64_t collectives_issued() const { return collectives_; }  // since construction (all axes, size > 1)
  CollectiveRunner& runner() { return runner_; }

 private:
  void execute_round(std::vector<CollectiveStage>& stages, std::vector<std::vector<MetricTensor>>& completed);
  CollectiveRunner& runner_;
  int64_t collectives_ = 0;
};

// Natural order of site names: digit runs compare as numbers ("layers.2" < "layers.10").
bool natural_less(const std::string& a, const std::string& b);

}  // namespace strata::tensor_metrics
