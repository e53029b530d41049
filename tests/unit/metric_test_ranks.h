// In-process ranks for tensor-metric unit tests: N threads, each with a CollectiveRunner whose
// axes are bound to groups of a rank grid, meeting in shared memory for every collective (sums in
// rank order in the tensor's dtype, as the deterministic communicators do). Lets a unit test run
// a metric over real Shard / FlatShard / Owned / Partial layouts and compare with a float64
// computation on the gathered tensors.
//   RankGrid grid({{Axis::TP, 2}, {Axis::DP, 2}});   // 4 ranks, the first axis fastest
//   auto out = run_ranks(grid, [&](CollectiveRunner& runner, int rank) { ...; return results; });
// Do not call Catch2 assertions inside the function (it is not thread safe): return values and
// check them on the main thread. An exception on any rank is rethrown by run_ranks.
#pragma once
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "training/observability/tensor_metrics/logical_reduction.h"
#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics::test {

class RankGrid {
 public:
  explicit RankGrid(std::vector<std::pair<Axis, int>> dims) : dims_(std::move(dims)) {
    world_ = 1;
    for (auto& d : dims_) world_ *= d.second;
  }
  int world() const { return world_; }
  int size(Axis a) const {
    for (auto& d : dims_)
      if (d.first == a) return d.second;
    return 1;
  }
  // Coordinate of `rank` on axis a (0 when the axis is not in the grid).
  int coord(int rank, Axis a) const {
    int stride = 1;
    for (auto& d : dims_) {
      if (d.first == a) return (rank / stride) % d.second;
      stride *= d.second;
    }
    return 0;
  }
  // The group of `rank` on axis a: an id shared by its members.
  int group_id(int rank, Axis a) const {
    int stride = 1, id = rank;
    for (auto& d : dims_) {
      if (d.first == a) return id - coord(rank, a) * stride;
      stride *= d.second;
    }
    return rank;
  }

 private:
  std::vector<std::pair<Axis, int>> dims_;
  int world_ = 1;
};

// One rendezvous per (axis, group): members deposit bytes, all read everyone's.
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n), slots_(static_cast<size_t>(n)) {}
  std::vector<std::string> exchange(int member, std::string bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    slots_[static_cast<size_t>(member)] = std::move(bytes);
    const int64_t gen = generation_;
    if (++arrived_ == n_) {
      last_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return last_;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
    return last_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  int64_t generation_ = 0;
  std::vector<std::string> slots_, last_;
};

class SharedRanks {
 public:
  explicit SharedRanks(const RankGrid& g) : grid(g) {}
  Rendezvous& rendezvous(Axis a, int group) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& r = map_[{static_cast<int>(a), group}];
    if (!r) r = std::make_unique<Rendezvous>(grid.size(a));
    return *r;
  }
  const RankGrid grid;

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, std::unique_ptr<Rendezvous>> map_;
};

class SimulatedRunner : public CollectiveRunner {
 public:
  SimulatedRunner(SharedRanks& shared, int rank) : s_(shared), rank_(rank) {}
  int size(Axis a) const override { return s_.grid.size(a); }
  int rank(Axis a) const override { return s_.grid.coord(rank_, a); }
  void all_reduce(Axis a, Tensor& t, ReduceOp op) override {
    const std::vector<std::string> all = exchange(a, pack(t));
    std::vector<Tensor> parts;
    for (const std::string& b : all) parts.push_back(unpack(b, t));
    // Rank order, in the tensor's dtype (the deterministic communicators' order).
    Tensor acc = parts.front().clone();
    for (size_t r = 1; r < parts.size(); ++r) {
      std::vector<double> x = acc.to_vector(), y = parts[r].to_vector();
      for (size_t i = 0; i < x.size(); ++i) x[i] = reduce_pair(op, x[i], y[i]);
      acc = Tensor::from_vector(x, t.shape(), t.dtype());
    }
    t.copy_(acc);
  }
  Tensor all_gather(Axis a, const Tensor& in) override {
    const std::vector<std::string> all = exchange(a, pack(in));
    Tensor out = Tensor::empty({in.numel() * static_cast<int64_t>(all.size())}, in.dtype(), Device::cpu());
    for (size_t r = 0; r < all.size(); ++r)
      if (in.numel() > 0) out.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).copy_(unpack(all[r], in).reshape({in.numel()}));
    return out;
  }
  std::vector<std::string> all_gather_bytes(Axis a, const std::string& bytes) override { return exchange(a, bytes); }

 private:
  std::vector<std::string> exchange(Axis a, std::string bytes) {
    return s_.rendezvous(a, s_.grid.group_id(rank_, a)).exchange(s_.grid.coord(rank_, a), std::move(bytes));
  }
  static std::string pack(const Tensor& t) {
    Tensor c = t.contiguous();
    return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  static Tensor unpack(const std::string& b, const Tensor& like) {
    Tensor t = Tensor::empty(like.shape(), like.dtype(), Device::cpu());
    std::copy(b.begin(), b.end(), static_cast<char*>(t.data_ptr()));
    return t;
  }
  SharedRanks& s_;
  int rank_;
};

// One rank: every axis of size 1 (collectives are identities).
class SingleRankRunner : public CollectiveRunner {
 public:
  int size(Axis) const override { return 1; }
  int rank(Axis) const override { return 0; }
  void all_reduce(Axis, Tensor&, ReduceOp) override {}
  Tensor all_gather(Axis, const Tensor& in) override { return in.clone(); }
  std::vector<std::string> all_gather_bytes(Axis, const std::string& b) override { return {b}; }
};

// The float64 reference statistics of a set of elements (the residual metrics' references).
struct ElementStatistics {
  std::vector<double> x;
  double rms() const {
    double s = 0;
    for (double v : x) s += v * v;
    return std::sqrt(s / static_cast<double>(x.size()));
  }
  double max_abs() const {
    double m = 0;
    for (double v : x) m = std::max(m, std::fabs(v));
    return m;
  }
  double kurtosis() const {  // two-pass central moments: m4 / m2²
    double mu = 0, m2 = 0, m4 = 0;
    for (double v : x) mu += v;
    mu /= static_cast<double>(x.size());
    for (double v : x) m2 += (v - mu) * (v - mu), m4 += std::pow(v - mu, 4);
    m2 /= static_cast<double>(x.size()), m4 /= static_cast<double>(x.size());
    return m4 / (m2 * m2);
  }
};

// Runs fn on every rank of the grid in its own thread; returns the ranks' results in rank order.
template <typename Fn>
auto run_ranks(const RankGrid& grid, Fn fn) {
  using R = decltype(fn(std::declval<CollectiveRunner&>(), 0));
  SharedRanks shared(grid);
  std::vector<R> results(static_cast<size_t>(grid.world()));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(grid.world()));
  std::vector<std::thread> threads;
  for (int r = 0; r < grid.world(); ++r)
    threads.emplace_back([&, r] {
      try {
        SimulatedRunner runner(shared, r);
        results[static_cast<size_t>(r)] = fn(runner, r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace strata::tensor_metrics::test
