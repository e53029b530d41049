// The MoE token dispatchers (models/layers/moe/token_dispatcher.h) on the whole world as the
// expert-parallel group ([mpi]: 2, 3 and 4 ranks; 12 experts): every rank routes its own tokens
// (deterministic per-rank inputs, so each rank recomputes every other rank's), and against a
// direct f64 computation:
//   - each dispatched row is its source token's hidden state with its pair's probability, rows
//     grouped by local expert (rows_per_expert = a direct count of the pairs routed to it over all
//     ranks, dropped pairs excluded), within an expert by source rank, then token;
//   - combine of y = (global expert id + 1) · row gives Σ over a token's kept pairs of (e + 1) · x;
//   - the backwards: combine_backward(dout) are dout's source rows; dispatch_backward sums the row
//     gradients per token and returns each kept pair's probability gradient (0 when dropped).
// Both dispatchers, with and without pad-to-capacity rows (the all-gather dispatcher pads each
// expert block to ep · capacity over the gathered tokens: its padded rows are checked through
// combine and the backwards only).
// Reference: Megatron-Core transformer/moe/token_dispatcher.py.
#include <map>
#include <vector>

#include "models/layers/moe/token_dispatcher.h"
#include "mpi_test_helpers.h"
#include "parallel/process_group.h"

namespace strata {
namespace {

using layers::moe::DispatcherKind;
using layers::moe::DispatchedRows;
using layers::moe::DispatchState;
using layers::moe::RoutingOutput;

constexpr int64_t kE = 12, kT = 7, kH = 3, kK = 2;

// Rank r's routing: distinct experts per token, a deterministic keep mask (some pairs dropped).
struct RankInput {
  std::vector<double> x;          // [T, H]
  std::vector<int64_t> experts;   // [T, k]
  std::vector<double> probs;      // [T, k]
  std::vector<uint8_t> kept;      // [T, k]
};
RankInput rank_input(int r) {
  RankInput in;
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t j = 0; j < kH; ++j) in.x.push_back(0.25 * static_cast<double>((r * 5 + t * 3 + j * 7) % 13) - 1.5);
    const int64_t e0 = (r * 7 + t * 5) % kE, e1 = (e0 + 1 + (r + t) % (kE - 1)) % kE;
    in.experts.insert(in.experts.end(), {e0, e1});
    in.probs.insert(in.probs.end(), {0.5 + 0.05 * static_cast<double>(t), 0.3 - 0.02 * static_cast<double>(r)});
    in.kept.insert(in.kept.end(), {1, static_cast<uint8_t>((r + t) % 3 != 0)});
  }
  return in;
}

RoutingOutput routing_of(const RankInput& in, int64_t capacity) {
  RoutingOutput o;
  o.top_indices = Tensor::from_data(in.experts, {kT, kK});
  o.top_probs = Tensor::from_vector(in.probs, {kT, kK}, DType::F64);
  o.top_kept = Tensor::from_data(in.kept, {kT, kK});
  o.capacity = capacity;
  return o;
}

void check_dispatcher(DispatcherKind kind, bool pad) {
  auto comm = mpitest::world_comm()->split(0, mpitest::world().rank());  // its own communicator (labelled "ep")
  const int n = comm->size(), me = comm->rank();
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)] = i;
  const ProcessGroup group("ep", ranks, me, comm);
  const int64_t local = kE / n, first = me * local, capacity = kT;  // capacity ≥ any expert's kept pairs
  auto dispatcher = layers::moe::make_token_dispatcher(kind, kE, group);
  const RankInput mine = rank_input(me);
  const Tensor x = Tensor::from_vector(mine.x, {kT, kH}, DType::F64);
  std::unique_ptr<DispatchState> st;
  const DispatchedRows d = dispatcher->dispatch(x, routing_of(mine, capacity), pad, st);

  // The expected rows: for each local expert, each source rank, each token routed there (kept).
  std::vector<std::vector<double>> want_rows;  // (x row..., prob)
  std::vector<int64_t> want_counts(static_cast<size_t>(local), 0);
  for (int64_t j = 0; j < local; ++j) {
    int64_t rows = 0;
    for (int src = 0; src < n; ++src) {
      const RankInput in = rank_input(src);
      int64_t from_src = 0;
      for (int64_t t = 0; t < kT; ++t)
        for (int64_t s = 0; s < kK; ++s) {
          const size_t p = static_cast<size_t>(t * kK + s);
          if (in.experts[p] != first + j || !in.kept[p]) continue;
          std::vector<double> row(in.x.begin() + t * kH, in.x.begin() + (t + 1) * kH);
          row.push_back(in.probs[p]);
          want_rows.push_back(row);
          ++from_src;
        }
      if (pad) {  // padding rows of this source's block: zeros, probability 0
        for (int64_t k = from_src; k < capacity; ++k) want_rows.push_back(std::vector<double>(kH + 1, 0.0));
        from_src = capacity;
      }
      rows += from_src;
    }
    want_counts[static_cast<size_t>(j)] = rows;
  }
  if (!pad || kind == DispatcherKind::AllToAll) {
    CHECK(d.rows_per_expert == want_counts);
    REQUIRE(d.rows.size(0) == static_cast<int64_t>(want_rows.size()));
    const std::vector<double> got = d.rows.to_vector(), gp = d.probs.to_vector();
    for (size_t r = 0; r < want_rows.size(); ++r)
      for (int64_t j = 0; j <= kH; ++j) {
        INFO("row " << r << " column " << j);
        const double g = j < kH ? got[r * kH + static_cast<size_t>(j)] : gp[r];
        CHECK(g == want_rows[r][static_cast<size_t>(j)]);
      }
  }
  // combine of y = (expert + 1) · row.
  std::vector<double> y = d.rows.to_vector();
  {
    int64_t r = 0;
    for (int64_t j = 0; j < local; ++j)
      for (int64_t k = 0; k < d.rows_per_expert[static_cast<size_t>(j)]; ++k, ++r)
        for (int64_t c = 0; c < kH; ++c) y[static_cast<size_t>(r * kH + c)] *= static_cast<double>(first + j + 1);
  }
  const Tensor yt = Tensor::from_vector(y, {d.rows.size(0), kH}, DType::F64);
  const std::vector<double> out = dispatcher->combine(yt, *st).to_vector();
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t c = 0; c < kH; ++c) {
      double want = 0.0;
      for (int64_t s = 0; s < kK; ++s) {
        const size_t p = static_cast<size_t>(t * kK + s);
        if (mine.kept[p]) want += static_cast<double>(mine.experts[p] + 1) * mine.x[static_cast<size_t>(t * kH + c)];
      }
      INFO("token " << t);
      CHECK(out[static_cast<size_t>(t * kH + c)] == Approx(want).epsilon(1e-14));
    }
  // Backwards: dout = x (so d(y) rows are source rows again); drows = rows, dprobs = 1 per row.
  const Tensor dy = dispatcher->combine_backward(x, *st);
  CHECK(dy.to_vector() == d.rows.to_vector());
  Tensor dtop;
  const std::vector<double> dx =
      dispatcher->dispatch_backward(d.rows, Tensor::full({d.rows.size(0)}, 1.0, DType::F64), *st, dtop).to_vector();
  const std::vector<double> dt = dtop.to_vector();
  for (int64_t t = 0; t < kT; ++t) {
    int64_t kept = 0;
    for (int64_t s = 0; s < kK; ++s) {
      const size_t p = static_cast<size_t>(t * kK + s);
      kept += mine.kept[p];
      CHECK(dt[p] == (mine.kept[p] ? 1.0 : 0.0));
    }
    for (int64_t c = 0; c < kH; ++c)
      CHECK(dx[static_cast<size_t>(t * kH + c)] ==
            Approx(static_cast<double>(kept) * mine.x[static_cast<size_t>(t * kH + c)]).epsilon(1e-14));
  }
}

TEST_CASE("moe dispatch: all-to-all rows, counts, combine and backwards against a direct count", "[mpi]") {
  check_dispatcher(DispatcherKind::AllToAll, false);
  check_dispatcher(DispatcherKind::AllToAll, true);
}

TEST_CASE("moe dispatch: all-gather rows, counts, combine and backwards against a direct count", "[mpi]") {
  check_dispatcher(DispatcherKind::AllGather, false);
  check_dispatcher(DispatcherKind::AllGather, true);
}

}  // namespace
}  // namespace strata
