// Megatron's cyclic sampler and torch.randperm (data/random_sampler.h) against the reference
// packages' own output: torch.randperm(n, generator=torch.Generator().manual_seed(seed)) from
// PyTorch 1.13 (Debian's python3-torch), and the micro-batches of Megatron's
// MegatronPretrainingRandomSampler class (megatron/training/datasets/data_samplers.py, executed
// unchanged under that torch and iterated as training.py's cyclic_iter does) for sharded and
// unsharded layouts, from the start and from a resumed consumed_samples. The unsharded case of 22
// samples over 4 ranks gives ranks 0–1 six samples an epoch and ranks 2–3 five, so their epochs
// drift apart: reproduced as Megatron has it.
#include <catch2/catch.hpp>

#include <vector>

#include "data/random_sampler.h"
#include "tests/unit/trainer_test_support.h"
#include "training/dataset_batch_source.h"

using namespace strata::data;

TEST_CASE("random sampler: torch.randperm element for element", "[random_sampler][data]") {
  CHECK(torch_randperm(10, 0) == std::vector<int64_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2});
  const std::vector<int64_t> p37 = torch_randperm(37, 5);
  CHECK(std::vector<int64_t>(p37.begin(), p37.begin() + 12) ==
        std::vector<int64_t>{4, 31, 0, 10, 12, 27, 8, 30, 26, 13, 20, 25});
  const std::vector<int64_t> p = torch_randperm(1000, 2);
  CHECK(std::vector<int64_t>(p.begin(), p.begin() + 12) ==
        std::vector<int64_t>{848, 205, 453, 475, 414, 614, 334, 128, 176, 284, 340, 506});
  int64_t weighted = 0;  // Σ i·p[i]: the whole permutation
  for (size_t i = 0; i < p.size(); ++i) weighted += static_cast<int64_t>(i) * p[i];
  CHECK(weighted == 250285520);
  CHECK(torch_randperm(0, 1).empty());
  CHECK(torch_randperm(1, 1) == std::vector<int64_t>{0});
}

TEST_CASE("random sampler: Megatron's MegatronPretrainingRandomSampler micro-batch for micro-batch",
          "[random_sampler][data]") {
  struct Case {
    int64_t total, mbs, rank, dp;
    bool sharding;
    int64_t start, count;
    std::vector<std::vector<int64_t>> batches;
  };
  const std::vector<Case> cases = {
    {23, 2, 0, 1, true, 0, 30, {{10, 4}, {15, 3}, {11, 5}, {9, 20}, {19, 13}, {2, 0}, {18, 16}, {7, 8}, {6, 14}, {17, 1}, {12, 21}, {11, 18}, {6, 0}, {3, 12}, {17, 1}, {15, 7}, {9, 5}, {10, 21}, {19, 20}, {16, 4}, {8, 2}, {14, 13}, {14, 4}, {3, 7}, {12, 8}, {5, 17}, {1, 20}, {16, 0}, {21, 11}, {19, 10}}},
    {23, 2, 1, 3, true, 0, 12, {{8, 11}, {9, 6}, {7, 10}, {7, 11}, {8, 6}, {9, 10}, {6, 9}, {7, 8}, {10, 11}, {10, 6}, {9, 8}, {7, 11}}},
    {23, 2, 2, 3, true, 12, 8, {{13, 16}, {13, 17}, {14, 12}, {15, 16}, {12, 15}, {13, 14}, {16, 17}, {16, 12}}},
    {22, 1, 2, 4, false, 0, 16, {{15}, {9}, {2}, {7}, {17}, {6}, {17}, {9}, {19}, {8}, {3}, {5}, {16}, {19}, {9}, {19}}},
    {22, 1, 0, 4, false, 8, 10, {{19}, {18}, {6}, {12}, {3}, {15}, {10}, {16}, {14}, {12}}},
    {23, 2, 1, 3, false, 0, 12, {{4, 11}, {20, 2}, {16, 6}, {18, 3}, {1, 9}, {21, 16}, {4, 12}, {17, 16}, {11, 2}, {18, 14}, {12, 0}, {9, 2}}},
  };
  for (const Case& c : cases) {
    INFO("total " << c.total << " mbs " << c.mbs << " rank " << c.rank << "/" << c.dp << " sharding " << c.sharding
                  << " start " << c.start);
    REQUIRE(static_cast<int64_t>(c.batches.size()) == c.count);
    RandomPretrainingSampler s(c.total, c.mbs, c.rank, c.dp, c.sharding);
    for (int64_t n = 0; n < c.count; ++n) CHECK(s.micro_batch(c.start, n) == c.batches[n]);
    // Out of order too (a pure function of the position).
    RandomPretrainingSampler t(c.total, c.mbs, c.rank, c.dp, c.sharding);
    for (int64_t n = c.count - 1; n >= 0; n -= 3) CHECK(t.micro_batch(c.start, n) == c.batches[n]);
  }
  // Too few samples for one micro-batch on every rank: refused.
  CHECK_THROWS_WITH(RandomPretrainingSampler(5, 2, 0, 3, true), Catch::Contains("data.dataloader_type"));
}

namespace {
struct IndexSamples : strata::data::SampleDataset {  // sample i is [i, i]: tokens = labels = [i]
  int64_t n = 23;
  int64_t size() const override { return n; }
  int64_t sample_length() const override { return 2; }
  void sample(int64_t i, int64_t* out) const override { out[0] = out[1] = i; }
};
std::vector<int64_t> rows_of(const strata::Batch& b) {
  std::vector<int64_t> out;
  for (double v : b.tokens.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}
}  // namespace

TEST_CASE("random sampler: the cyclic data loader's rows, from the start and after a resume",
          "[random_sampler][data]") {
  using namespace strata;
  auto ds = std::make_shared<IndexSamples>();
  // dp rank 1 of 3, micro-batches of 2, two per step (global batch 12): the fixture's sharded case.
  DatasetBatchSource src(ds, 2, 2, EodRules{}, /*dp_rank=*/1, /*dp_size=*/3);
  src.use_random_sampler(/*data_sharding=*/true);
  const std::vector<std::vector<int64_t>> want = {{8, 11}, {9, 6}, {7, 10}, {7, 11}, {8, 6}, {9, 10}};
  for (int64_t step = 1; step <= 3; ++step)
    for (int64_t mb = 0; mb < 2; ++mb) {
      const Batch b = src.next_microbatch(step, mb);
      CHECK(rows_of(b) == want[static_cast<size_t>((step - 1) * 2 + mb)]);
      CHECK(b.first_sample_index == (step - 1) * 12 + mb * 6 + 2);  // the sequential positions (dropout keys)
    }
  // A resume at step 2 (12 consumed samples) builds its sampler there: the same rows.
  DatasetBatchSource resumed(ds, 2, 2, EodRules{}, 1, 3);
  resumed.use_random_sampler(true);
  CHECK(rows_of(resumed.next_microbatch(2, 0)) == want[2]);
  CHECK(rows_of(resumed.next_microbatch(3, 1)) == want[5]);
  CHECK_THROWS_WITH(resumed.next_microbatch(1, 0), Catch::Contains("cyclic sampler was built at sample 12"));
}

TEST_CASE("random sampler: Megatron's --dataloader-type and --no-data-sharding", "[random_sampler][config]") {
  using namespace strata;
  const std::string yaml = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  const std::vector<std::string> base = {"--train-iters", "10", "--global-batch-size", "2", "--micro-batch-size", "1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  CHECK(test::config_from_flags(yaml, with({})).data->dataloader_type == DataloaderType::Single);
  const ResolvedConfig c = test::config_from_flags(yaml, with({"--dataloader-type", "cyclic", "--no-data-sharding"}));
  CHECK(c.data->dataloader_type == DataloaderType::Cyclic);
  CHECK_FALSE(c.data->data_sharding);
  CHECK(test::config_from_flags(yaml, with({"--dataloader-type", "cyclic"})).data->data_sharding);
  CHECK_THAT(test::error_of([&] { test::config_from_flags(yaml, with({"--no-data-sharding"})); }),
             Catch::Contains("data.data_sharding"));
  CHECK_THAT(test::error_of([&] { test::config_from_flags(yaml, with({"--dataloader-type", "external"})); }),
             Catch::Contains("dataloader_type"));
}
