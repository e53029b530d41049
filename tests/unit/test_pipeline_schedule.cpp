// Pipeline schedule orders (training/schedule_order.h) against hand-written tables of Megatron-Core's
// 1F1B and interleaved schedules (schedules.py), the warm-up counts, the bubble fraction, and the
// argument checks. No communication: the executed order is checked under mpirun in
// tests/mpi/test_pipeline_parallel.cpp.
#include <set>

#include "parallel/pipeline_layout.h"
#include "test_helpers.h"
#include "training/config/config.h"
#include "training/schedule_order.h"

namespace strata {
namespace {

std::string order(int64_t pp, int64_t rank, int64_t vpp, int64_t m) {
  return to_string(pipeline_schedule_order(pp, rank, vpp, m));
}

TEST_CASE("1F1B order: pp 2 and 4 against hand-written tables", "[pipeline_schedule]") {
  CHECK(order(1, 0, 1, 3) == "F0 B0 F1 B1 F2 B2");
  CHECK(order(2, 0, 1, 4) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(order(2, 1, 1, 4) == "F0 B0 F1 B1 F2 B2 F3 B3");
  CHECK(order(4, 0, 1, 4) == "F0 F1 F2 F3 B0 B1 B2 B3");
  CHECK(order(4, 0, 1, 8) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(order(4, 1, 1, 8) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  CHECK(order(4, 2, 1, 8) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  CHECK(order(4, 3, 1, 8) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: all forwards first.
  CHECK(order(4, 0, 1, 2) == "F0 F1 B0 B1");
}

TEST_CASE("interleaved order: pp 2 and 4, vpp 2, against hand-written tables", "[pipeline_schedule]") {
  // m == pp: every pass is a warm-up forward, then all backwards.
  CHECK(order(2, 0, 2, 2) == "F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1");
  CHECK(order(2, 0, 2, 4) == "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  CHECK(order(2, 1, 2, 4) == "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
  CHECK(order(4, 3, 2, 8) ==
        "F0 F1 F2 F3 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4 B0 F5 B1 F6 B2 F7 B3 "
        "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4 B5 B6 B7");
  CHECK(order(4, 0, 2, 8) ==
        "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 B0.1 F7 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0 F7.1 B1 "
        "B2 B3 B4.1 B5.1 B6.1 B7.1 B4 B5 B6 B7");
  CHECK(num_warmup_micro_batches(4, 0, 2, 8) == 10);
  CHECK(num_warmup_micro_batches(4, 3, 2, 8) == 4);
  CHECK(num_warmup_micro_batches(2, 0, 2, 2) == 4);
  CHECK(num_warmup_micro_batches(4, 1, 1, 8) == 2);
}

TEST_CASE("schedule orders: every pass once, backward after its forward, chunk order", "[pipeline_schedule]") {
  for (int64_t pp : {1, 2, 3, 4}) {
    for (int64_t vpp : {1, 2, 3}) {
      if (vpp > 1 && pp == 1) continue;
      for (int64_t m : {pp, 2 * pp, 3 * pp}) {
        for (int64_t rank = 0; rank < pp; ++rank) {
          const auto ops = pipeline_schedule_order(pp, rank, vpp, m);
          REQUIRE(ops.size() == static_cast<size_t>(2 * m * vpp));
          std::set<std::tuple<int, int64_t, int64_t>> seen;
          for (size_t i = 0; i < ops.size(); ++i) {
            const auto& op = ops[i];
            const int kind = op.kind == PipelineOp::Kind::Forward ? 0 : 1;
            CHECK(seen.insert({kind, op.micro_batch, op.chunk}).second);
            if (kind == 1) CHECK(seen.count({0, op.micro_batch, op.chunk}) == 1);  // forward ran before
            // A chunk's forward follows the previous chunk's forward of the same micro-batch.
            if (kind == 0 && op.chunk > 0) CHECK(seen.count({0, op.micro_batch, op.chunk - 1}) == 1);
            if (kind == 1 && op.chunk < vpp - 1) CHECK(seen.count({1, op.micro_batch, op.chunk + 1}) == 1);
          }
        }
      }
    }
  }
}

TEST_CASE("schedule orders: bubble fraction and bad arguments", "[pipeline_schedule]") {
  CHECK(pipeline_bubble_fraction(4, 1, 8) == Approx(3.0 / 8.0));
  CHECK(pipeline_bubble_fraction(4, 2, 8) == Approx(3.0 / 16.0));
  CHECK(pipeline_bubble_fraction(1, 1, 8) == 0.0);
  CHECK_THROWS_WITH(pipeline_schedule_order(2, 0, 2, 3), Catch::Contains("multiple of pipeline_model_parallel_size"));
  CHECK_THROWS_WITH(pipeline_schedule_order(2, 2, 1, 4), Catch::Contains("rank 2 outside a pipeline of 2"));
  CHECK_THROWS_WITH(pipeline_schedule_order(1, 0, 2, 4), Catch::Contains("needs more than one stage"));
  CHECK_THROWS_WITH(pipeline_schedule_order(2, 0, 1, 0), Catch::Contains("micro-batches must be >= 1"));
}

ResolvedConfig pipeline_config(const std::vector<std::string>& extra, int64_t world) {
  std::vector<std::string> o = {"model.num_layers=8", "model.hidden_size=32", "model.num_attention_heads=4",
                                "model.vocab_size=128", "model.seq_length=16", "model.max_position_embeddings=16",
                                "training.micro_batch_size=1", "training.global_batch_size=8"};
  o.insert(o.end(), extra.begin(), extra.end());
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", o, "pp.yaml");
  return cfg.validate(world);
}

TEST_CASE("pipeline layout: Megatron layer offsets of stages and model chunks", "[pipeline_schedule]") {
  auto layout = [](const ResolvedConfig& c, int64_t p, int64_t chunk) {
    const PipelineChunkLayout l = pipeline_chunk_layout(*c.parallel, c.model->num_layers, p, chunk);
    return std::to_string(l.first_layer) + "+" + std::to_string(l.num_layers) + (l.pre_process ? "E" : "") +
           (l.post_process ? "L" : "");
  };
  // Even split, pp 4: two layers each.
  const ResolvedConfig even = pipeline_config({"parallel.pipeline_model_parallel_size=4"}, 4);
  CHECK(layout(even, 0, 0) == "0+2E");
  CHECK(layout(even, 1, 0) == "2+2");
  CHECK(layout(even, 3, 0) == "6+2L");
  // pp 2 × vpp 2 (8 layers): rank 0 holds layers 0-1 and 4-5, rank 1 holds 2-3 and 6-7
  // (offset c·L/v + p·L/(v·pp)).
  const ResolvedConfig vpp = pipeline_config({"parallel.pipeline_model_parallel_size=2",
                                              "parallel.virtual_pipeline_model_parallel_size=2"}, 2);
  CHECK(layout(vpp, 0, 0) == "0+2E");
  CHECK(layout(vpp, 1, 0) == "2+2");
  CHECK(layout(vpp, 0, 1) == "4+2");
  CHECK(layout(vpp, 1, 1) == "6+2L");
  // Uneven: first stage 1 layer, last stage 3, the other 4 evenly over the 2 middle stages.
  const ResolvedConfig uneven = pipeline_config({"parallel.pipeline_model_parallel_size=4",
                                                 "parallel.num_layers_in_first_pipeline_stage=1",
                                                 "parallel.num_layers_in_last_pipeline_stage=3"}, 4);
  CHECK(layout(uneven, 0, 0) == "0+1E");
  CHECK(layout(uneven, 1, 0) == "1+2");
  CHECK(layout(uneven, 2, 0) == "3+2");
  CHECK(layout(uneven, 3, 0) == "5+3L");
  CHECK_THROWS_WITH(layout(even, 4, 0), Catch::Contains("pipeline rank 4 outside"));
  CHECK_THROWS_WITH(layout(vpp, 0, 2), Catch::Contains("model chunk 2 outside"));
  // The interleaved schedule's micro-batch rule is a config error.
  CHECK_THROWS_WITH(pipeline_config({"parallel.pipeline_model_parallel_size=2",
                                     "parallel.virtual_pipeline_model_parallel_size=2",
                                     "training.global_batch_size=3"}, 2),
                    Catch::Contains("parallel.virtual_pipeline_model_parallel_size"));
}

}  // namespace
}  // namespace strata
