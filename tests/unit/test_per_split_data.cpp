// Per-split datasets (data.train_data_path / valid_data_path / test_data_path and
// data.per_split_data_args_path: data/data_config.h, data/blended_dataset.h): Megatron's
// blend_per_split builds each split from its own datasets, each whole (split_spoof (0, 1)). The
// training split of [A] equals the training split of data_path A with split "1,0,0" sample for
// sample; a weighted validation blend of A and V draws its samples from each in the weights'
// proportions; a split without datasets is not built. The flags, the JSON file in both of its forms
// (lists, or one string), and the exclusions Megatron asserts, each refused naming the field.
#include <catch2/catch.hpp>

#include <fstream>

#include "core/formats/indexed_dataset.h"
#include "data/blended_dataset.h"
#include "formats_test_helpers.h"
#include "tests/unit/trainer_test_support.h"

using namespace strata;
using namespace strata::data;

namespace {
// Prefix `name` in dir: 40 documents of 5–11 tokens, token = base + 10·document + position.
void write_documents(const test::TempDir& dir, const std::string& name, int64_t base) {
  formats::IndexedDatasetBuilder b(dir.file(name), formats::TokenDType::U16);
  for (int d = 0; d < 40; ++d) {
    std::vector<int64_t> doc(5 + d % 7);
    for (size_t j = 0; j < doc.size(); ++j) doc[j] = base + d * 10 + static_cast<int64_t>(j);
    b.add_document(doc);
  }
  b.finalize();
}
}  // namespace

TEST_CASE("per-split data: each split from its own datasets, each whole", "[per_split][data]") {
  test::TempDir dir("per_split");
  write_documents(dir, "A", 0);
  write_documents(dir, "V", 1000);
  GPTDataConfig cfg;
  cfg.per_split = true;
  cfg.per_split_data_path = {dir.file("A"), "0.25 " + dir.file("A") + " 0.75 " + dir.file("V"), ""};
  cfg.seq_length = 4;
  cfg.num_samples = {60, 40, 8};
  const auto sets = build_gpt_datasets(cfg);
  REQUIRE(sets[0] != nullptr);
  REQUIRE(sets[1] != nullptr);
  CHECK(sets[2] == nullptr);  // no test datasets

  GPTDataConfig whole;  // A cut by split "1,0,0": the whole of A is the training split
  whole.data_path = dir.file("A");
  whole.split = "1,0,0";
  whole.seq_length = 4;
  whole.num_samples = {60, 0, 0};
  const auto ref = build_gpt_datasets(whole);
  REQUIRE(ref[0] != nullptr);
  REQUIRE(sets[0]->size() == ref[0]->size());
  for (int64_t i = 0; i < sets[0]->size(); ++i) CHECK(sets[0]->sample(i) == ref[0]->sample(i));

  CHECK(sets[1]->size() == 40);
  int64_t from_v = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const std::vector<int64_t> s = sets[1]->sample(i);
    const bool v = s[0] >= 1000;
    from_v += v;
    for (int64_t t : s) CHECK((t >= 1000) == v);  // one dataset per sample
  }
  CHECK(from_v == 30);  // 0.75 of 40
}

TEST_CASE("per-split data: Megatron's flags, the JSON file and the exclusions", "[per_split][config]") {
  test::TempDir dir("per_split_cfg");
  const std::string yaml = "optimizer:\n  lr: 1.0e-3\n";
  const std::vector<std::string> base = {"--train-iters", "10", "--global-batch-size", "2", "--micro-batch-size", "1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  const ResolvedConfig lists =
      test::config_from_flags(yaml, with({"--train-data-path", "0.3", "a", "0.7", "b", "--valid-data-path", "c"}));
  CHECK(lists.data->per_split());
  const auto blends = lists.data->split_blends();
  REQUIRE(blends[0].size() == 2);
  CHECK(blends[0][1].prefix == "b");
  CHECK(blends[0][1].weight == Approx(0.7));
  CHECK(blends[1].size() == 1);
  CHECK(blends[2].empty());

  const std::string json_path = dir.file("splits.json");
  std::ofstream(json_path) << R"({"train": ["0.5", "t1", "0.5", "t2"], "valid": "v1 v2", "test": []})";
  const ResolvedConfig file = test::config_from_flags(yaml, with({"--per-split-data-args-path", json_path}));
  const auto fb = file.data->split_blends();
  REQUIRE(fb[0].size() == 2);
  CHECK(fb[0][0].prefix == "t1");
  REQUIRE(fb[1].size() == 2);  // a string of prefixes, split at white space
  CHECK(fb[1][1].prefix == "v2");
  CHECK(fb[1][1].weight == 0.5);
  CHECK(fb[2].empty());

  auto error = [&](std::vector<std::string> flags) {
    return test::error_of([&] { test::config_from_flags(yaml, with(std::move(flags))); });
  };
  const std::string no_test = dir.file("no_test.json");
  std::ofstream(no_test) << R"({"train": ["t1"], "valid": ["v1"]})";
  CHECK_THAT(error({"--per-split-data-args-path", no_test}),
             Catch::Contains("data.per_split_data_args_path") && Catch::Contains("has no \"test\""));
  CHECK_THAT(error({"--per-split-data-args-path", json_path, "--train-data-path", "a"}),
             Catch::Contains("data.per_split_data_args_path"));
  CHECK_THAT(error({"--data-path", "x", "--train-data-path", "a"}), Catch::Contains("data.data_path"));
  CHECK_THAT(error({"--valid-data-path", "v"}), Catch::Contains("data.train_data_path") &&
                                                    Catch::Contains("the training split has no datasets"));
  CHECK_THAT(error({"--train-data-path", "a", "0.5", "b"}), Catch::Contains("data.train_data_path"));
  CHECK_THAT(error({"--per-split-data-args-path", dir.file("missing.json")}), Catch::Contains("cannot read"));
}
