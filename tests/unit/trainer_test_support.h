// Test support for the training library: a tiny bigram LanguageModel (logits = W[token] + b,
// dropout on the logits keyed by (seed, step, micro-batch), Megatron cross entropy), with hooks to
// inject a NaN gradient or raise a signal at a chosen step; and a test-only safetensors-layout
// TensorFileIO (the product one is core/formats/safetensors.h, not on this branch).
#pragma once
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "models/language_model.h"
#include "training/config/config.h"
#include "training/checkpointing/tensor_file.h"

namespace strata::test {

class BigramModel : public LanguageModel {
 public:
  BigramModel(int64_t vocab, DType dtype = DType::F32, double dropout = 0.1) : vocab_(vocab), dropout_(dropout) {
    w_.name = "embedding.word_embeddings.weight";
    w_.value = Tensor::zeros({vocab, vocab}, dtype);
    w_.global_shape = w_.value.shape();
    w_.init_std = 0.5;
    b_.name = "output_layer.bias";
    b_.value = Tensor::zeros({vocab}, dtype);
    b_.global_shape = b_.value.shape();
    b_.no_weight_decay = true;
    b_.init_value = 0.0;
  }
  int64_t nan_step = -1;     // backward at this step writes NaN into the bias gradient
  int64_t signal_step = -1;  // forward at this step raises signal_number
  int signal_number = SIGTERM;
  uint64_t seed = 7;

  std::vector<Parameter*> parameters() override { return {&w_, &b_}; }
  void init_parameters(uint64_t s) override {
    seed = s;
    init_parameter(w_, s);
    init_parameter(b_, s);
  }

  struct Ctx : ForwardContext {
    Tensor ids, targets, logits, row_max, sum_exp;
    philox::Key key;
  };
  std::unique_ptr<ForwardContext> make_context(int64_t step, int64_t mb, bool training) override {
    auto c = std::make_unique<Ctx>();
    c->step = step;
    c->micro_batch = mb;
    c->training = training;
    c->key = philox::Key{seed, philox::stream_id("bigram.dropout") ^ static_cast<uint64_t>(step * 1000003 + mb)};
    return c;
  }
  ForwardOutput forward_pass(ForwardContext& base, const Batch& batch) override {
    Ctx& c = static_cast<Ctx&>(base);
    if (c.training && c.step == signal_step) std::raise(signal_number);
    const int64_t n = batch.tokens.numel();
    c.ids = batch.tokens.reshape({n});
    c.targets = batch.labels.reshape({n});
    const Tensor w = w_.value.to(DType::F32), b = b_.value.to(DType::F32);
    Tensor emb = Tensor::empty({n, vocab_}, DType::F32);
    kernels::embedding_forward(c.ids, w, emb);
    c.logits = Tensor::empty({n, vocab_}, DType::F32);
    kernels::add_bias(emb, b, c.logits);
    if (c.training && dropout_ > 0) kernels::dropout_forward(c.logits, c.logits, dropout_, c.key);
    Tensor loss = Tensor::empty({n}, DType::F32);
    c.row_max = Tensor::empty({n}, DType::F32);
    c.sum_exp = Tensor::empty({n}, DType::F32);
    kernels::cross_entropy_forward(c.logits, c.targets, loss, c.row_max, c.sum_exp);
    ForwardOutput out;
    out.losses.push_back({kLmLossName, LossReduction::PerToken, loss.reshape(batch.tokens.shape())});
    return out;
  }
  void backward_pass(ForwardContext& base, const BackwardInput& grads) override {
    Ctx& c = static_cast<Ctx&>(base);
    const Tensor& dlosses = grads.loss_grads.at(0);
    const int64_t n = c.ids.numel();
    Tensor dlogits = Tensor::empty({n, vocab_}, DType::F32);
    kernels::cross_entropy_backward(c.logits, c.targets, c.row_max, c.sum_exp, dlosses.reshape({n}), dlogits);
    if (c.training && dropout_ > 0) kernels::dropout_backward(dlogits, dlogits, dropout_, c.key);
    kernels::bias_grad(dlogits, b_.main_grad, /*accumulate=*/true);
    kernels::embedding_backward(c.ids, dlogits, w_.main_grad, /*accumulate=*/true);
    if (c.step == nan_step) b_.main_grad.narrow(0, 1, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  }

  Parameter w_, b_;

 private:
  int64_t vocab_;
  double dropout_;
};

// The production checkpoint tensor files (safetensors via make_default_tensor_file_io()), as a
// default-constructible TensorFileIO for the tests.
class TestSafetensorsIO : public TensorFileIO {
 public:
  std::string extension() const override { return impl_->extension(); }
  void write(const std::string& path, const std::map<std::string, Tensor>& tensors,
             const std::map<std::string, std::string>& metadata) override {
    impl_->write(path, tensors, metadata);
  }
  TensorFileContents read(const std::string& path) override { return impl_->read(path); }

 private:
  std::shared_ptr<TensorFileIO> impl_ = make_default_tensor_file_io();
};

// The message of what f throws ("(no error)" when it returns).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) { return e.what(); }
  return "(no error)";
}

// A config from YAML text with Megatron command-line flags applied, validated for `world` ranks.
inline ResolvedConfig config_from_flags(const std::string& yaml, const std::vector<std::string>& flags,
                                        int64_t world = 1) {
  StrataConfig c = StrataConfig::from_yaml_text(yaml, {}, "flags.yaml");
  StrataConfig::table().apply_command_line(flags, c, nullptr);
  return c.validate(world);
}

// A small valid config: bigram-sized mock run.
inline ResolvedConfig tiny_config(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"training.micro_batch_size=2", "training.global_batch_size=6",
                                "training.train_iters=20",     "model.seq_length=8",
                                "model.max_position_embeddings=8", "optimizer.lr_warmup_iters=3",
                                "optimizer.lr_decay_style=cosine",   "optimizer.min_lr=1.0e-4", "optimizer.lr_decay_iters=20",
                                "logging.log_interval=5",      "training.eval_interval=1000",
                                "training.eval_iters=2",       "optimizer.weight_decay=0.1"};
  o.insert(o.end(), extra.begin(), extra.end());
  const StrataConfig cfg =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 5.0e-2\ndata:\n  mock_data: true\n", o, "tiny.yaml");
  return cfg.validate(1);
}

}  // namespace strata::test
