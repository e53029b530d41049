// The rank grid (parallel/rank_grid.h): every group of every kind against closed formulas written
// here independently of the implementation (tp: a contiguous block, cp: stride tp, dp: stride
// tp·cp, pp: stride world/pp, …), for many (world, tp, cp, pp, ep, etp) layouts up to 1024 ranks;
// every rank in exactly one group of each kind; Megatron's own documented examples; and
// build_parallel_groups() against a threaded in-process fake communicator whose split() is a real
// rendezvous (MPI_Comm_split semantics) and records every (color, key).
// Reference: megatron/core/parallel_state.py (initialize_model_parallel docstring,
// generate_masked_orthogonal_rank_groups docstring).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "parallel/rank_grid.h"
#include "test_helpers.h"

namespace strata {
namespace {

using Groups = std::vector<std::vector<int>>;

// ---- closed formulas (independent of the implementation) -----------------------------------
struct Layout {
  int world, tp, cp, pp, ep, etp;
  int dp() const { return world / (tp * cp * pp); }
  int edp() const { return world / (etp * ep * pp); }
};

std::vector<int> range_stride(int first, int count, int stride) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i * stride);
  return v;
}

// The expected group of `kind` holding rank r (ascending), or {} when r is in none.
std::vector<int> expected_group(const Layout& L, GroupKind kind, int r) {
  const int tp = L.tp, cp = L.cp, dp = L.dp(), pp = L.pp, stage = L.world / pp;
  const int tp_rank = r % tp, cp_rank = (r / tp) % cp, dp_rank = (r / (tp * cp)) % dp, pp_rank = r / stage;
  const int etp = L.etp, ep = L.ep;
  const int etp_rank = r % etp, ep_rank = (r / etp) % ep, edp_rank = (r / (etp * ep)) % L.edp();
  switch (kind) {
    case GroupKind::Tp: return range_stride(r - tp_rank, tp, 1);
    case GroupKind::Cp: return range_stride(r - cp_rank * tp, cp, tp);
    case GroupKind::Dp: return range_stride(r - dp_rank * tp * cp, dp, tp * cp);
    case GroupKind::DpCp: return range_stride(tp_rank + pp_rank * stage, cp * dp, tp);
    case GroupKind::TpCp: return range_stride(r - r % (tp * cp), tp * cp, 1);
    case GroupKind::Pp: return range_stride(r % stage, pp, stage);
    case GroupKind::Mp: {  // same cp and dp coordinates: tp fastest, then pp
      std::vector<int> v;
      for (int p = 0; p < pp; ++p)
        for (int t = 0; t < tp; ++t) v.push_back(t + (cp_rank + cp * dp_rank) * tp + p * stage);
      return v;
    }
    case GroupKind::Embedding:
      if (pp == 1) return {r};
      if (pp_rank == 0 || pp_rank == pp - 1) return {r % stage, r % stage + (pp - 1) * stage};
      return {};
    case GroupKind::PositionEmbedding: return pp_rank == 0 ? std::vector<int>{r} : std::vector<int>{};
    case GroupKind::Ep: return range_stride(r - ep_rank * etp, ep, etp);
    case GroupKind::ExpertTp: return range_stride(r - etp_rank, etp, 1);
    case GroupKind::ExpertDp: return range_stride(r - edp_rank * etp * ep, L.edp(), etp * ep);
    case GroupKind::TpEp: return range_stride(r - r % (etp * ep), etp * ep, 1);
    case GroupKind::TpDpCp: return range_stride(pp_rank * stage, stage, 1);  // the whole stage
  }
  return {};
}

int expected_size(const Layout& L, GroupKind kind) {
  switch (kind) {
    case GroupKind::Tp: return L.tp;
    case GroupKind::Cp: return L.cp;
    case GroupKind::Dp: return L.dp();
    case GroupKind::DpCp: return L.dp() * L.cp;
    case GroupKind::TpCp: return L.tp * L.cp;
    case GroupKind::Pp: return L.pp;
    case GroupKind::Mp: return L.tp * L.pp;
    case GroupKind::Embedding: return L.pp == 1 ? 1 : 2;
    case GroupKind::PositionEmbedding: return 1;
    case GroupKind::Ep: return L.ep;
    case GroupKind::ExpertTp: return L.etp;
    case GroupKind::ExpertDp: return L.edp();
    case GroupKind::TpEp: return L.etp * L.ep;
    case GroupKind::TpDpCp: return L.tp * L.cp * L.dp();
  }
  return 0;
}

std::vector<GroupKind> all_kinds() {
  std::vector<GroupKind> v;
  for (int k = 0; k < kNumGroupKinds; ++k) v.push_back(static_cast<GroupKind>(k));
  return v;
}

// Checks every group of every kind of one layout; returns the number of failed checks (CHECK
// inside loops of millions would swamp the report, so failures are counted and the first few shown).
int check_layout(const Layout& L) {
  const RankGrid grid(L.world, L.tp, L.cp, L.pp, L.ep, L.etp);
  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (failures++ < 5)
      FAIL_CHECK("world " << L.world << " tp " << L.tp << " cp " << L.cp << " pp " << L.pp << " ep " << L.ep
                          << " etp " << L.etp << ": " << what);
  };
  if (grid.dp() != L.dp() || grid.expert_dp() != L.edp()) fail("dp sizes");
  for (GroupKind kind : all_kinds()) {
    const Groups& groups = grid.groups(kind);
    const bool embedding_kind = kind == GroupKind::Embedding || kind == GroupKind::PositionEmbedding;
    const int size = expected_size(L, kind);
    const size_t n_groups = embedding_kind ? L.world / L.pp : L.world / size;
    if (groups.size() != n_groups) fail(std::string(group_kind_name(kind)) + ": number of groups");
    std::vector<int> seen(L.world, 0);
    for (const auto& g : groups) {
      if (static_cast<int>(g.size()) != size) fail(std::string(group_kind_name(kind)) + ": group size");
      for (int r : g)
        if (r >= 0 && r < L.world) ++seen[r];
    }
    for (int r = 0; r < L.world; ++r) {
      const std::vector<int> want = expected_group(L, kind, r);
      if (seen[r] != (want.empty() ? 0 : 1))
        fail(std::string(group_kind_name(kind)) + ": rank " + std::to_string(r) + " in " + std::to_string(seen[r]) +
             " groups");
      if (want.empty()) {
        if (grid.group_index(kind, r) != -1) fail(std::string(group_kind_name(kind)) + ": non-member has a group");
        continue;
      }
      const int g = grid.group_index(kind, r);
      if (g < 0 || groups[g] != want) fail(std::string(group_kind_name(kind)) + ": group of rank " + std::to_string(r));
      if (grid.position(kind, r) < 0 || want[grid.position(kind, r)] != r)
        fail(std::string(group_kind_name(kind)) + ": position of rank " + std::to_string(r));
    }
  }
  for (int r = 0; r < L.world; ++r) {
    const RankCoordinates c = grid.coordinates(r);
    if (r != c.tp_rank + L.tp * (c.cp_rank + L.cp * (c.dp_rank + L.dp() * c.pp_rank))) fail("decoder coordinates");
    if (r != c.expert_tp_rank + L.etp * (c.ep_rank + L.ep * (c.expert_dp_rank + L.edp() * c.pp_rank)))
      fail("expert coordinates");
    if (grid.position(GroupKind::Tp, r) != c.tp_rank || grid.position(GroupKind::Cp, r) != c.cp_rank ||
        grid.position(GroupKind::Dp, r) != c.dp_rank || grid.position(GroupKind::Pp, r) != c.pp_rank ||
        grid.position(GroupKind::Ep, r) != c.ep_rank || grid.position(GroupKind::ExpertTp, r) != c.expert_tp_rank ||
        grid.position(GroupKind::ExpertDp, r) != c.expert_dp_rank)
      fail("coordinates vs positions of rank " + std::to_string(r));
  }
  return failures;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

}  // namespace

TEST_CASE("rank grid: Megatron's documented examples", "[rank_grid]") {
  // initialize_model_parallel docstring: 16 GPUs, tp 2, pp 4.
  const RankGrid g(16, 2, 1, 4);
  CHECK(g.dp() == 2);
  CHECK(g.groups(GroupKind::Dp) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(g.groups(GroupKind::Tp) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  CHECK(g.groups(GroupKind::Pp) == Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
  CHECK(g.groups(GroupKind::Embedding) == Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}});
  CHECK(g.groups(GroupKind::PositionEmbedding) == Groups{{0}, {1}, {2}, {3}});
  CHECK(g.group_index(GroupKind::Embedding, 5) == -1);
  CHECK_THROWS_WITH(g.group_of(GroupKind::Embedding, 5), Catch::Contains("rank 5 is in no embedding group"));

  // Its context-parallel paragraph: 8 GPUs, tp 4, cp 2 → cp groups [0,4] [1,5] [2,6] [3,7].
  const RankGrid c(8, 4, 2, 1);
  CHECK(c.groups(GroupKind::Cp) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(c.groups(GroupKind::TpCp) == Groups{{0, 1, 2, 3, 4, 5, 6, 7}});

  // generate_masked_orthogonal_rank_groups docstring: sizes [2, 3, 4], mask [F, T, F].
  const Groups dp = masked_orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  REQUIRE(dp.size() == 8);
  CHECK(dp[0] == std::vector<int>{0, 2, 4});
  CHECK(dp[1] == std::vector<int>{1, 3, 5});
  CHECK(dp[7] == std::vector<int>{19, 21, 23});
  // Its tp-pp-dp example: 8 GPUs of size 2-2-2, dp = [[0,4],[1,5],[2,6],[3,7]].
  CHECK(masked_orthogonal_rank_groups(8, {2, 2, 2}, {false, false, true}) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
}

TEST_CASE("rank grid: every group equals its closed formula for many layouts", "[rank_grid]") {
  int layouts = 0;
  for (int world : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
    for (int tp : divisors(world))
      for (int cp : divisors(world / tp))
        for (int pp : divisors(world / (tp * cp)))
          for (int ep : divisors(world / pp))
            for (int etp : {1, 2, tp}) {
              if (world % (etp * ep * pp) != 0) continue;
              if (etp == tp && tp <= 2) continue;  // already visited as 1 or 2
              if (world > 24 && etp != tp) continue;  // keep the case under a few seconds
              ++layouts;
              REQUIRE(check_layout({world, tp, cp, pp, ep, etp}) == 0);
            }
  }
  INFO(layouts << " layouts");
  CHECK(layouts > 500);
}

TEST_CASE("rank grid: 1024-rank layouts", "[rank_grid]") {
  for (Layout L : {Layout{1024, 8, 1, 16, 1, 8}, Layout{1024, 4, 2, 8, 8, 1}, Layout{1024, 8, 4, 4, 16, 2},
                   Layout{1024, 1, 1, 1, 64, 1}, Layout{1024, 2, 8, 2, 4, 4}})
    CHECK(check_layout(L) == 0);
}

TEST_CASE("rank grid: from the parallel config, and bad sizes", "[rank_grid]") {
  ParallelConfig p;
  p.world_size = 32;
  p.tensor_model_parallel_size = 2;
  p.context_parallel_size = 2;
  p.pipeline_model_parallel_size = 4;
  p.expert_model_parallel_size = 4;
  finalize_parallel_config(p, std::nullopt);
  const RankGrid g = RankGrid::from_config(p);
  CHECK(g.dp() == 2);
  CHECK(g.etp() == 2);
  CHECK(g.expert_dp() == 1);
  CHECK(g.group_of(GroupKind::DpCp, 5) == std::vector<int>{1, 3, 5, 7});
  CHECK(g.coordinates(13).pp_rank == 1);
  CHECK(g.is_last_stage(31));
  CHECK_FALSE(g.is_last_stage(23));

  CHECK_THROWS_WITH(RankGrid(12, 8, 1, 1), Catch::Contains("world size 12 is not divisible by tp (8)"));
  CHECK_THROWS_WITH(RankGrid(8, 2, 1, 2, 4), Catch::Contains("is not divisible by expert tp (2) x ep (4) x pp (2)"));
  CHECK_THROWS_WITH(RankGrid(8, 0, 1, 1), Catch::Contains("sizes must be positive"));
  CHECK_THROWS_WITH(g.coordinates(32), Catch::Contains("rank 32 is outside the world of 32"));
}

// ---- build_parallel_groups against a fake communicator ---------------------------------------
namespace {

// One communicator as all its ranks see it: its members (global ranks) and the split rendezvous.
struct FakeShared {
  std::vector<int> members;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  std::vector<std::pair<int, int>> requests;                          // [rank] → (color, key)
  std::vector<std::pair<std::shared_ptr<FakeShared>, int>> results;  // [rank] → (child, rank in it)
  explicit FakeShared(std::vector<int> m_) : members(std::move(m_)), requests(members.size()) {}
};

// The (color, key) of every split a rank made, in order, and on which backend.
struct SplitRecord {
  std::string backend;
  int color, key;
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeShared> s, int rank, DeviceType device, std::vector<SplitRecord>* log)
      : s_(std::move(s)), rank_(rank), device_(device), log_(log) {}
  int size() const override { return static_cast<int>(s_->members.size()); }
  int rank() const override { return rank_; }
  const char* backend() const override { return device_ == DeviceType::CPU ? "fake_host" : "fake_device"; }
  DeviceType device_type() const override { return device_; }
  const std::vector<int>& members() const { return s_->members; }

  void all_reduce(Tensor&, ReduceOp) override { unused(); }
  void reduce_scatter(const Tensor&, Tensor&, ReduceOp) override { unused(); }
  void all_gather(const Tensor&, Tensor&) override { unused(); }
  void all_gather_v(const Tensor&, Tensor&, const std::vector<int64_t>&) override { unused(); }
  void all_to_all(const Tensor&, Tensor&) override { unused(); }
  void all_to_all_v(const Tensor&, const std::vector<int64_t>&, Tensor&, const std::vector<int64_t>&) override {
    unused();
  }
  void broadcast(Tensor&, int) override { unused(); }
  void batch_send_recv(std::vector<PointToPoint>&) override { unused(); }
  void barrier() override { unused(); }

  // MPI_Comm_split: wait for every rank, group by color, order by (key, old rank).
  std::shared_ptr<Communicator> split(int color, int key) override {
    log_->push_back({backend(), color, key});
    std::unique_lock<std::mutex> lk(s_->m);
    const int64_t gen = s_->generation;
    s_->requests[rank_] = {color, key};
    if (++s_->arrived == size()) {
      std::map<int, std::vector<std::pair<int, int>>> by_color;  // color → (key, old rank)
      for (int r = 0; r < size(); ++r)
        if (s_->requests[r].first >= 0) by_color[s_->requests[r].first].push_back({s_->requests[r].second, r});
      s_->results.assign(size(), {nullptr, -1});
      for (auto& [c, v] : by_color) {
        std::sort(v.begin(), v.end());
        std::vector<int> members;
        for (auto& kr : v) members.push_back(s_->members[kr.second]);
        auto child = std::make_shared<FakeShared>(members);
        for (size_t i = 0; i < v.size(); ++i) s_->results[v[i].second] = {child, static_cast<int>(i)};
      }
      s_->arrived = 0;
      ++s_->generation;
      s_->cv.notify_all();
    } else if (!s_->cv.wait_for(lk, std::chrono::seconds(20), [&] { return s_->generation != gen; })) {
      throw std::runtime_error("fake split: not every rank called split (a collective mismatch)");
    }
    auto [child, r] = s_->results[rank_];
    return child ? std::make_shared<FakeCommunicator>(child, r, device_, log_) : nullptr;
  }

 private:
  [[noreturn]] static void unused() { throw std::runtime_error("fake communicator: only split is implemented"); }
  std::shared_ptr<FakeShared> s_;
  int rank_;
  DeviceType device_;
  std::vector<SplitRecord>* log_;
};

const std::vector<int>& members_of(const std::shared_ptr<Communicator>& c) {
  return dynamic_cast<const FakeCommunicator&>(*c).members();
}

const ProcessGroup& group_in(const ParallelGroups& g, GroupKind k) {
  switch (k) {
    case GroupKind::Tp: return g.tp;
    case GroupKind::Cp: return g.cp;
    case GroupKind::Dp: return g.dp;
    case GroupKind::DpCp: return g.dp_cp;
    case GroupKind::TpCp: return g.tp_cp;
    case GroupKind::Pp: return g.pp;
    case GroupKind::Mp: return g.mp;
    case GroupKind::Embedding: return g.embedding;
    case GroupKind::PositionEmbedding: return g.position_embedding;
    case GroupKind::Ep: return g.ep;
    case GroupKind::ExpertTp: return g.expert_tp;
    case GroupKind::ExpertDp: return g.expert_dp;
    case GroupKind::TpEp: return g.tp_ep;
    case GroupKind::TpDpCp: return g.tp_dp_cp;
  }
  return g.world;
}

void check_build(const Layout& L, bool with_device) {
  ParallelConfig p;
  p.world_size = L.world;
  p.tensor_model_parallel_size = L.tp;
  p.context_parallel_size = L.cp;
  p.pipeline_model_parallel_size = L.pp;
  p.expert_model_parallel_size = L.ep;
  p.expert_tensor_parallel_size = L.etp;
  finalize_parallel_config(p, std::nullopt);
  std::vector<int> all(L.world);
  for (int r = 0; r < L.world; ++r) all[r] = r;
  auto host_world = std::make_shared<FakeShared>(all), device_world = std::make_shared<FakeShared>(all);

  std::vector<ParallelGroups> out(L.world);
  std::vector<std::vector<SplitRecord>> logs(L.world);
  std::vector<std::string> errors(L.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < L.world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto host = std::make_shared<FakeCommunicator>(host_world, r, DeviceType::CPU, &logs[r]);
        std::shared_ptr<Communicator> device;
        if (with_device) device = std::make_shared<FakeCommunicator>(device_world, r, DeviceType::CUDA, &logs[r]);
        out[r] = build_parallel_groups(p, host, device);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < L.world; ++r) REQUIRE(errors[r] == "");

  const RankGrid grid(L.world, L.tp, L.cp, L.pp, L.ep, L.etp);
  for (int r = 0; r < L.world; ++r) {
    const ParallelGroups& g = out[r];
    CHECK(g.world_size == L.world);
    CHECK(g.global_rank == r);
    CHECK(g.world.size() == L.world);
    // The splits this rank made: one (or two, with a device world) per kind with a group > 1
    // rank, in the build order, color = group index, key = position.
    std::vector<SplitRecord> want;
    for (GroupKind k : group_build_order()) {
      if (expected_size(L, k) == 1) continue;
      const std::vector<int> expect = expected_group(L, k, r);
      const int color = expect.empty() ? -1 : grid.group_index(k, r);
      const int key = expect.empty() ? -1 : grid.position(k, r);
      want.push_back({"fake_host", color, key});
      if (with_device) want.push_back({"fake_device", color, key});
    }
    REQUIRE(logs[r].size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(logs[r][i].backend == want[i].backend);
      CHECK(logs[r][i].color == want[i].color);
      CHECK(logs[r][i].key == want[i].key);
    }
    for (GroupKind k : all_kinds()) {
      INFO("rank " << r << " kind " << group_kind_name(k));
      const ProcessGroup& pg = group_in(g, k);
      CHECK(pg.name() == group_kind_name(k));
      const std::vector<int> expect = expected_group(L, k, r);
      if (expect.empty()) {  // a rank off the embedding stages
        CHECK(pg.ranks() == std::vector<int>{r});
        CHECK(pg.host_comm() == nullptr);
        continue;
      }
      CHECK(pg.ranks() == expect);
      CHECK(expect[pg.rank()] == r);
      if (expect.size() == 1) {
        CHECK(pg.host_comm() == nullptr);
      } else {
        REQUIRE(pg.host_comm() != nullptr);
        CHECK(members_of(pg.host_comm()) == expect);  // the communicator holds exactly the group
        CHECK(pg.host_comm()->rank() == pg.rank());
        if (with_device) {
          REQUIRE(pg.device_comm() != nullptr);
          CHECK(members_of(pg.device_comm()) == expect);
        } else {
          CHECK(pg.device_comm() == nullptr);
        }
      }
    }
    const int stage = grid.coordinates(r).pp_rank;
    CHECK(g.in_embedding_group == (L.pp == 1 || stage == 0 || stage == L.pp - 1));
    CHECK(g.in_position_embedding_group == (stage == 0));
  }
}

}  // namespace

TEST_CASE("rank grid: build_parallel_groups splits the world by the grid", "[rank_grid]") {
  SECTION("tp2 pp2 dp2, host only") { check_build({8, 2, 1, 2, 1, 2}, false); }
  SECTION("tp2 cp2 pp4 dp1 with a device world (middle stages off the embedding group)") {
    check_build({16, 2, 2, 4, 1, 2}, true);
  }
  SECTION("tp2 dp4 ep4 etp1 (expert grid differs from the decoder grid)") { check_build({8, 2, 1, 1, 4, 1}, false); }
  SECTION("a world of one: single-process groups, no communicator needed") {
    ParallelConfig p;
    finalize_parallel_config(p, 1);
    ParallelGroups g = build_parallel_groups(p, nullptr);
    CHECK(g.world_size == 1);
    CHECK(g.tp.host_comm() == nullptr);
    CHECK(g.in_embedding_group);
  }
  SECTION("a communicator of the wrong size") {
    ParallelConfig p;
    p.world_size = 8;
    finalize_parallel_config(p, std::nullopt);
    std::vector<SplitRecord> log;
    auto four = std::make_shared<FakeCommunicator>(std::make_shared<FakeShared>(std::vector<int>{0, 1, 2, 3}), 0,
                                                   DeviceType::CPU, &log);
    CHECK_THROWS_WITH(build_parallel_groups(p, four), Catch::Contains("host communicator has 4 ranks"));
    CHECK_THROWS_WITH(build_parallel_groups(p, nullptr), Catch::Contains("needs a host communicator"));
    CHECK(log.empty());
  }
}

}  // namespace strata
