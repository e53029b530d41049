// Counter-based RNG: Philox known-answer vectors, distribution moments, and the shard property
// (a shard draws exactly the numbers of its slice of the global tensor).
#include "core/random.h"
#include "test_helpers.h"

using namespace strata;

TEST_CASE("philox4x32-10 known-answer vectors (Random123 kat_vectors)", "[rng]") {
  // counter (0,0,0,0), key (0,0)
  auto b = philox::philox4x32_10(0, 0, 0);
  CHECK(b.v[0] == 0x6627e8d5u);
  CHECK(b.v[1] == 0xe169c58du);
  CHECK(b.v[2] == 0xbc57ac4cu);
  CHECK(b.v[3] == 0x9b00dbd8u);
  // counter all ones, key all ones
  b = philox::philox4x32_10(~0ull, ~0ull, ~0ull);
  CHECK(b.v[0] == 0x408f276du);
  CHECK(b.v[1] == 0x41c83b0eu);
  CHECK(b.v[2] == 0xa20bc7c6u);
  CHECK(b.v[3] == 0x6d5451fdu);
}

TEST_CASE("deterministic log and cos match libm", "[rng]") {
  for (double x : {1e-300, 1e-10, 0.001, 0.3, 0.5, 0.70710678, 0.9, 0.999999, 1.0})
    CHECK(philox::det_log(x) == Approx(std::log(x)).epsilon(1e-15).margin(1e-15));
  for (int i = 0; i <= 1000; ++i) {
    double u = i / 1000.0;
    CHECK(philox::det_cos_2pi(u) == Approx(std::cos(2 * M_PI * u)).margin(2e-15));
  }
}

TEST_CASE("random fills: moments", "[rng]") {
  Tensor u = Tensor::empty({200000}, DType::F64), n = Tensor::empty({200000}, DType::F64);
  fill_uniform(u, {42, 1});
  fill_normal(n, {42, 2}, 1.0, 2.0);
  auto uv = u.to_vector(), nv = n.to_vector();
  double um = 0, nm = 0, nvar = 0;
  for (double x : uv) {
    REQUIRE(x >= 0.0);
    REQUIRE(x < 1.0);
    um += x;
  }
  for (double x : nv) nm += x;
  um /= uv.size();
  nm /= nv.size();
  for (double x : nv) nvar += (x - nm) * (x - nm);
  nvar /= nv.size();
  CHECK(um == Approx(0.5).margin(0.005));
  CHECK(nm == Approx(1.0).margin(0.02));
  CHECK(nvar == Approx(4.0).margin(0.06));
  Tensor m = Tensor::empty({100000}, DType::F32);
  fill_bernoulli(m, {42, 3}, 0.1);
  double ones = 0;
  for (double x : m.to_vector()) ones += x;
  CHECK(ones / 100000 == Approx(0.1).margin(0.005));
  CHECK_THROWS_WITH(fill_bernoulli(m, {1, 1}, 1.5), Catch::Contains("outside [0, 1]"));
}

TEST_CASE("random fills: same key, same numbers, different stream, different numbers", "[rng]") {
  Tensor a = Tensor::empty({1000}, DType::F32), b = Tensor::empty({1000}, DType::F32), c = Tensor::empty({1000}, DType::F32);
  fill_normal(a, {7, 11});
  fill_normal(b, {7, 11});
  fill_normal(c, {7, 12});
  CHECK(a.to_vector() == b.to_vector());
  CHECK(a.to_vector() != c.to_vector());
}

TEST_CASE("random fills: every shard draws its slice of the global tensor", "[rng][shard]") {
  Shape global{6, 10};
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    Tensor full = Tensor::empty(global, dt);
    fill_normal(full, {3, 5}, 0.0, 0.02);
    for (int dim : {0, 1}) {
      for (int parts : {2, 3}) {
        if (global[dim] % parts) continue;
        for (int r = 0; r < parts; ++r) {
          Shape local = global;
          local[dim] /= parts;
          Tensor shard = Tensor::empty(local, dt);
          fill_normal(shard, {3, 5}, 0.0, 0.02, GlobalSlice::shard(global, dim, r, parts));
          Tensor expected = full.narrow(dim, r * local[dim], local[dim]);
          REQUIRE(shard.to_vector() == expected.to_vector());
        }
      }
    }
  }
  // uniform and bernoulli too, on a 3-d tensor split along the middle dimension
  Tensor full = Tensor::empty({2, 8, 3}, DType::F32);
  fill_uniform(full, {9, 9});
  Tensor shard = Tensor::empty({2, 2, 3}, DType::F32);
  fill_uniform(shard, {9, 9}, 0.0, 1.0, GlobalSlice::shard({2, 8, 3}, 1, 3, 4));
  CHECK(shard.to_vector() == full.narrow(1, 6, 2).to_vector());
}
