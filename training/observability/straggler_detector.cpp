// Straggler detection (see straggler_detector.h).
// Reference: megatron/core/utils.py (StragglerDetector.report, _check_toggle, _handler, _controller).
#include "training/observability/straggler_detector.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "core/logging.h"
#include "core/tensor.h"

namespace strata {

namespace {
std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", ms);
  return buf;
}

std::string rank_list(const std::vector<size_t>& order, const std::vector<double>& ms) {
  std::string out;
  for (size_t r : order) out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " " + ms_text(ms[r]);
  return out;
}
}  // namespace

std::vector<std::string> straggler_report_lines(const std::vector<double>& ms, int64_t count) {
  if (ms.empty()) return {};
  std::vector<size_t> order(ms.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Slowest first; equal times by rank, so the report is the same on every rank.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] > ms[b]; });
  const size_t slow = order.front(), fast = order.back();
  std::vector<std::string> lines = {" straggler detector | compute ms/iteration: max " + ms_text(ms[slow]) + " (rank " +
                                    std::to_string(slow) + ") | min " + ms_text(ms[fast]) + " (rank " +
                                    std::to_string(fast) + ")"};
  const auto n = static_cast<size_t>(std::max<int64_t>(count, 0));
  if (n > 1 && n < ms.size()) {
    std::vector<size_t> slowest(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<size_t> fastest(order.rbegin(), order.rbegin() + static_cast<std::ptrdiff_t>(n));
    lines.push_back(" straggler detector | slowest " + std::to_string(n) + ": " + rank_list(slowest, ms) +
                    " | fastest " + std::to_string(n) + ": " + rank_list(fastest, ms));
  }
  return lines;
}

StragglerDetector::StragglerDetector(const ProcessGroup& world, int64_t minmax_count, bool enabled,
                                     std::optional<int64_t> port)
    : world_(world), minmax_count_(minmax_count), enabled_(enabled) {
  if (port && world_.rank() == 0) listen(*port);
}

StragglerDetector::~StragglerDetector() {
  stopping_ = true;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (controller_.joinable()) controller_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

// Megatron binds 0.0.0.0:port with SO_REUSEADDR and, when that fails, warns and runs uncontrolled.
void StragglerDetector::listen(int64_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof addr;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    log::warn("straggler detector: cannot listen on port {} ({}); it cannot be toggled while running", port,
              std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return;
  }
  listen_fd_ = fd;
  listening_port_ = ntohs(addr.sin_port);
  log::info("straggler detector: toggle it with a connection to port {} (curl localhost:{}); now {}",
            listening_port_, listening_port_, enabled_ ? "on" : "off");
  controller_ = std::thread([this] { serve(); });
}

void StragglerDetector::serve() {
  while (!stopping_) {
    const int conn = ::accept(listen_fd_, nullptr, nullptr);
    if (conn < 0) {
      if (errno == EINTR) continue;
      return;  // shut down (or the socket failed): no more toggles
    }
    char request[1024];
    (void)::recv(conn, request, sizeof request, 0);
    toggle_requested_ = true;
    const std::string msg = std::string("Will turn the straggler detector ") + (enabled_ ? "OFF" : "ON") +
                            " at the next logging interval";
    const std::string resp = "HTTP/1.0 200 OK\r\nConnection: Close\r\nContent-length: " + std::to_string(msg.size()) +
                             "\r\n\r\n" + msg;
    (void)::send(conn, resp.data(), resp.size(), MSG_NOSIGNAL);
    ::close(conn);
  }
}

void StragglerDetector::add(double compute_seconds) {
  if (enabled_) compute_seconds_ += compute_seconds;
}

std::vector<std::string> StragglerDetector::report(int64_t iterations) {
  // One collective carries every rank's time (its own slot) and rank 0's toggle request (the last).
  const auto world = static_cast<size_t>(world_.size());
  std::vector<double> slots(world + 1, 0.0);
  slots[static_cast<size_t>(world_.rank())] = 1000.0 * compute_seconds_ / static_cast<double>(std::max<int64_t>(iterations, 1));
  if (world_.rank() == 0) slots[world] = toggle_requested_.exchange(false) ? 1.0 : 0.0;
  if (world > 1) {
    Tensor t = Tensor::from_vector(slots, {static_cast<int64_t>(slots.size())}, DType::F64, Device::cpu());
    world_.all_reduce(t, ReduceOp::Sum);
    slots = t.to_vector();
  }
  std::vector<std::string> lines;
  if (enabled_) lines = straggler_report_lines(std::vector<double>(slots.begin(), slots.end() - 1), minmax_count_);
  compute_seconds_ = 0.0;
  if (slots[world] != 0.0) {
    enabled_ = !enabled_;
    lines.push_back(std::string(" straggler detector toggled ") + (enabled_ ? "ON" : "OFF"));
  }
  return lines;
}

}  // namespace strata
