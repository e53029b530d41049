// The straggler detector (training/observability/straggler_detector.h; Megatron --log-straggler):
// the report lines for hand-made per-rank times, the toggle over TCP (Megatron's controller: a
// connection toggles it at the next report), the config rules, the Megatron flags, and a training
// run that logs the line. The multi-rank gather: tests/mpi/test_straggler_detector.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <sstream>

#include "trainer_test_support.h"
#include "training/observability/straggler_detector.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;

namespace {
// Connects to localhost:port, sends a request and returns the reply (Megatron's `curl` toggle).
std::string http_get(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string req = "GET / HTTP/1.0\r\n\r\n";
  REQUIRE(::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size()));
  std::string reply;
  char buf[256];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return reply;
}
}  // namespace

TEST_CASE("straggler detector: the slowest and fastest ranks of hand-made times", "[straggler]") {
  const std::vector<double> ms = {12.5, 20.25, 9.0, 15.0};
  std::vector<std::string> lines = straggler_report_lines(ms, 1);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == " straggler detector | compute ms/iteration: max 20.25 (rank 1) | min 9.00 (rank 2)");
  lines = straggler_report_lines(ms, 2);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1] == " straggler detector | slowest 2: rank 1 20.25, rank 3 15.00 | fastest 2: rank 2 9.00, rank 0 12.50");
  CHECK(straggler_report_lines(ms, 4).size() == 1);  // Megatron lists them only for 1 < count < world
  // Equal times: the lower rank first among the slowest, the same on every rank.
  CHECK(straggler_report_lines({5.0, 5.0}, 1)[0] == " straggler detector | compute ms/iteration: max 5.00 (rank 0) | min 5.00 (rank 1)");
  CHECK(straggler_report_lines({}, 1).empty());
}

TEST_CASE("straggler detector: one rank's average, and a TCP connection toggles it", "[straggler]") {
  StragglerDetector d(ProcessGroup::single("world"), 1, /*enabled=*/false, /*port=*/0);
  REQUIRE(d.listening_port() > 0);
  d.add(1.0);  // off: not counted
  CHECK(d.report(1).empty());
  CHECK_THAT(http_get(d.listening_port()), Contains("200 OK") && Contains("Will turn the straggler detector ON"));
  std::vector<std::string> lines = d.report(1);  // the toggle takes effect at this report
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == " straggler detector toggled ON");
  CHECK(d.enabled());
  d.add(0.010);
  d.add(0.030);
  lines = d.report(2);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == " straggler detector | compute ms/iteration: max 20.00 (rank 0) | min 20.00 (rank 0)");
  CHECK_THAT(http_get(d.listening_port()), Contains("Will turn the straggler detector OFF"));
  lines = d.report(1);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1] == " straggler detector toggled OFF");
}

TEST_CASE("straggler detector: config rules and Megatron's flags", "[straggler][megatron_flags]") {
  CHECK_THROWS_WITH(tiny_config({"logging.straggler_minmax_count=4"}),
                    Contains("logging.straggler_minmax_count") && Contains("needs logging.log_straggler"));
  CHECK_THROWS_WITH(tiny_config({"logging.disable_straggler_on_startup=true"}),
                    Contains("logging.disable_straggler_on_startup"));
  CHECK_THROWS_WITH(tiny_config({"logging.log_straggler=true", "logging.straggler_ctrlr_port=70000"}),
                    Contains("logging.straggler_ctrlr_port"));
  const ResolvedConfig c = config_from_flags("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n",
                                             {"--log-straggler", "--disable-straggler-on-startup",
                                              "--straggler-minmax-count", "16", "--straggler-ctrlr-port", "0"});
  CHECK(c.logging->log_straggler);
  CHECK(c.logging->disable_straggler_on_startup);
  CHECK(c.logging->straggler_minmax_count == 16);
  CHECK(c.logging->straggler_ctrlr_port == 0);
}

TEST_CASE("straggler detector: a training run logs the ranks at each log interval", "[straggler]") {
  const ResolvedConfig cfg = tiny_config({"training.train_iters=4", "logging.log_interval=2",
                                          "logging.log_straggler=true", "logging.straggler_ctrlr_port=0"});
  const int64_t vocab = 16;
  BigramModel model(vocab);
  MockBatchSource train(vocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, model, train, nullptr, opt);
  trainer.train();
  const std::string text = log.str();
  size_t count = 0;
  for (size_t at = 0; (at = text.find("straggler detector | compute ms/iteration: max ", at)) != std::string::npos; ++at)
    ++count;
  CHECK(count == 2);
  CHECK_THAT(text, Contains("(rank 0) | min "));
}
