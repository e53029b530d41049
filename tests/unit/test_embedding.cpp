// Embedding lookup (kernels/embedding.h): hand cases, duplicate ids, vocab-parallel shards, range
// errors, weight gradient against finite differences in f64, low precision against f64, odd shapes.
#include "kernels/embedding.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
// Random ids in [0, v) as i64 (or i32), drawn from the Philox stream `seed`.
Tensor random_ids(int64_t n, int64_t v, uint64_t seed, DType dtype = DType::I64) {
  Tensor u = random_tensor({n}, seed, 0.0, static_cast<double>(v));
  std::vector<int64_t> ids(n);
  std::vector<double> uv = u.to_vector();
  for (int64_t i = 0; i < n; ++i) ids[i] = std::min<int64_t>(static_cast<int64_t>(uv[i]), v - 1);
  Tensor t = Tensor::from_data(ids, {n});
  return dtype == DType::I64 ? t : t.to(dtype);
}
}  // namespace

TEST_CASE("embedding: hand-computed lookup and duplicate ids in backward", "[embedding]") {
  Tensor w = Tensor::from_vector({0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, {4, 3}, DType::F64);
  for (DType idt : {DType::I64, DType::I32}) {
    Tensor ids = Tensor::from_data<int64_t>({2, 0, 2, 3}, {4}).to(idt);
    Tensor out = Tensor::empty({4, 3}, DType::F64);
    embedding_forward(ids, w, out);
    CHECK(out.to_vector() == std::vector<double>{20, 21, 22, 0, 1, 2, 20, 21, 22, 30, 31, 32});

    Tensor dout = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3}, DType::F64);
    Tensor dw = Tensor::full({4, 3}, 99.0, DType::F64);
    embedding_backward(ids, dout, dw, /*accumulate=*/false);
    // row 2 appears at positions 0 and 2: 1+7, 2+8, 3+9; row 1 never appears -> 0.
    CHECK(dw.to_vector() == std::vector<double>{4, 5, 6, 0, 0, 0, 8, 10, 12, 10, 11, 12});
    embedding_backward(ids, dout, dw, /*accumulate=*/true);
    CHECK(dw.to_vector() == std::vector<double>{8, 10, 12, 0, 0, 0, 16, 20, 24, 20, 22, 24});
  }
}

TEST_CASE("embedding: a vocab shard gives zero rows for non-local ids", "[embedding]") {
  // Shard holding global rows 2..3 of a vocabulary of 5.
  Tensor w = Tensor::from_vector({20, 21, 30, 31}, {2, 2}, DType::F32);
  Tensor ids = Tensor::from_data<int64_t>({0, 3, 2, 4, 3}, {5});
  Tensor out = Tensor::empty({5, 2}, DType::F32);
  embedding_forward(ids, w, out, /*vocab_start=*/2, /*vocab_size_global=*/5);
  CHECK(out.to_vector() == std::vector<double>{0, 0, 30, 31, 20, 21, 0, 0, 30, 31});
  Tensor dout = Tensor::from_vector({1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, {5, 2}, DType::F32);
  Tensor dw = Tensor::empty({2, 2}, DType::F32);
  embedding_backward(ids, dout, dw, false, 2);
  CHECK(dw.to_vector() == std::vector<double>{3, 3, 7, 7});
}

TEST_CASE("embedding: ids outside the global vocabulary are errors", "[embedding][errors]") {
  Tensor w = Tensor::zeros({4, 2}, DType::F32);
  Tensor out = Tensor::empty({2, 2}, DType::F32);
  CHECK_THROWS_WITH(embedding_forward(Tensor::from_data<int64_t>({1, 4}, {2}), w, out, 0, 4),
                    Catch::Contains("ids[1] = 4 is outside the vocabulary [0, 4)"));
  CHECK_THROWS_WITH(embedding_forward(Tensor::from_data<int32_t>({-1, 0}, {2}), w, out),
                    Catch::Contains("ids[0] = -1 is negative"));
  // Without vocab_size_global, a large id is simply not local: a zero row.
  embedding_forward(Tensor::from_data<int64_t>({1, 400}, {2}), w, out);
  CHECK(out.to_vector() == std::vector<double>{0, 0, 0, 0});
  Tensor dw = Tensor::empty({4, 2}, DType::F32);
  CHECK_THROWS_WITH(embedding_backward(Tensor::from_data<int64_t>({-3, 0}, {2}), out, dw, false),
                    Catch::Contains("is negative"));
}

TEST_CASE("embedding: weight gradient matches finite differences (f64)", "[embedding][grad]") {
  for (int64_t vocab_start : {0, 3}) {
    const int64_t n = 9, v = 5, h = 6;
    Tensor w = random_tensor({v, h}, 21);
    Tensor ids = random_ids(n, v + 3, 22);  // some ids fall outside [vocab_start, vocab_start + v)
    Tensor r = random_tensor({n, h}, 23);
    Tensor out = Tensor::empty({n, h}, DType::F64);
    auto loss = [&] {
      embedding_forward(ids, w, out, vocab_start);
      return test::dot(out, r);
    };
    Tensor num = numeric_gradient(w, loss);
    Tensor dw = Tensor::empty({v, h}, DType::F64);
    embedding_backward(ids, r, dw, false, vocab_start);
    check_gradient("embedding dweight", dw, num, 1e-8);
  }
}

TEST_CASE("embedding: f32, bf16, f16 against f64, odd and long shapes", "[embedding][dtype]") {
  struct Bound { DType dt; double bwd; };
  struct Case { int64_t n, v, h; };
  for (Bound b : {Bound{DType::F32, 1e-6}, Bound{DType::BF16, 1e-2}, Bound{DType::F16, 2e-3}}) {
    for (Case c : {Case{1, 1, 1}, Case{1, 7, 4099}, Case{37, 13, 130}, Case{300, 50304, 3}}) {
      INFO(dtype_name(b.dt) << " n=" << c.n << " v=" << c.v << " h=" << c.h);
      Tensor ids = random_ids(c.n, c.v, 31, DType::I32);
      Tensor w = random_tensor({c.v, c.h}, 32, -1, 1, b.dt), dout = random_tensor({c.n, c.h}, 33, -1, 1, b.dt);
      Tensor out_ref = Tensor::empty({c.n, c.h}, DType::F64), dw_ref = Tensor::empty({c.v, c.h}, DType::F64);
      embedding_forward(ids, w.to(DType::F64), out_ref);
      embedding_backward(ids, dout.to(DType::F64), dw_ref, false);
      Tensor out = Tensor::empty({c.n, c.h}, b.dt), dw = Tensor::empty({c.v, c.h}, b.dt);
      embedding_forward(ids, w, out);
      embedding_backward(ids, dout, dw, false);
      CHECK(normalized_error(out, out_ref) == 0.0);  // a lookup is exact
      CHECK(normalized_error(dw, dw_ref) <= b.bwd);
    }
  }
}

TEST_CASE("embedding: vocab-parallel shards reproduce the full table", "[embedding]") {
  const int64_t n = 50, v = 24, h = 5;
  Tensor ids = random_ids(n, v, 41);
  Tensor w = random_tensor({v, h}, 42, -1, 1, DType::F32), dout = random_tensor({n, h}, 43, -1, 1, DType::F32);
  Tensor out = Tensor::empty({n, h}, DType::F32), dw = Tensor::empty({v, h}, DType::F32);
  embedding_forward(ids, w, out, 0, v);
  embedding_backward(ids, dout, dw, false);
  for (int parts : {2, 4}) {
    const int64_t vl = v / parts;
    std::vector<double> sum(n * h, 0.0);
    for (int r = 0; r < parts; ++r) {
      Tensor wl = w.narrow(0, r * vl, vl).contiguous();
      Tensor ol = Tensor::empty({n, h}, DType::F32), dwl = Tensor::empty({vl, h}, DType::F32);
      embedding_forward(ids, wl, ol, r * vl, v);
      std::vector<double> o = ol.to_vector();
      for (int64_t i = 0; i < n * h; ++i) sum[i] += o[i];  // the TP all-reduce
      embedding_backward(ids, dout, dwl, false, r * vl);
      CHECK(dwl.to_vector() == dw.narrow(0, r * vl, vl).contiguous().to_vector());
    }
    CHECK(sum == out.to_vector());
  }
}

TEST_CASE("embedding: bad arguments are rejected", "[embedding][errors]") {
  Tensor w = Tensor::zeros({4, 3}, DType::F32);
  Tensor out = Tensor::empty({2, 3}, DType::F32);
  Tensor ids = Tensor::from_data<int64_t>({0, 1}, {2});
  CHECK_THROWS_WITH(embedding_forward(Tensor::zeros({2}, DType::F32), w, out), Catch::Contains("ids must be i64 or i32"));
  CHECK_THROWS_WITH(embedding_forward(ids, w, Tensor::empty({2, 4}, DType::F32)), Catch::Contains("out [2, 4] must be [n, h]"));
  CHECK_THROWS_WITH(embedding_forward(ids, w, Tensor::empty({2, 3}, DType::BF16)), Catch::Contains("dtype mismatch"));
  CHECK_THROWS_WITH(embedding_forward(ids, w, out, 2, 5), Catch::Contains("exceed vocab_size_global 5"));
  CHECK_THROWS_WITH(embedding_forward(ids, w, out, -1), Catch::Contains("vocab_start must be >= 0"));
  CHECK_THROWS_WITH(embedding_backward(ids, out, Tensor::empty({4, 2}, DType::F32), false),
                    Catch::Contains("dout [2, 3] must be [n, h]"));
  CHECK_THROWS_WITH(embedding_forward(ids.reshape({1, 2}), w, out), Catch::Contains("ids must be 1-D"));
}
