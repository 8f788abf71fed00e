// The training loop (examples/common/trainer.h) with --device cuda: the run
// matches the CPU's, reports the device's peak memory, and its checkpoint
// resumes on the CPU.  Skipped (and passing) without a device.
#include <csignal>

#include "cuda_helpers.h"
#include "headroom/examples/common/trainer.h"
#include "transformer_helpers.h"

using namespace headroom;
using namespace headroom::examples;
using headroom::testing::TempDir;

namespace {

ModelConfig counting_config(const std::string& attention) {
  ModelConfig c = testing::tiny_model_config(8);
  c.dim = 16, c.heads = 4, c.decoder_layers = 1;
  c.attention.type = attention;
  if (attention == "moh") c.attention.options = {{"shared_heads", "1"}, {"routed_k", "2"}};
  return c;
}

// A tiny decoder LM continuing counting sequences; batches are built on the
// CPU and sent to the model's device, as the binaries' tasks do.
class CountingLmTask : public ModelTask<DecoderLM> {
 public:
  explicit CountingLmTask(const std::string& attention) : ModelTask(counting_config(attention), 5) { build_model(); }
  int64_t batch_rows(int64_t) const override { return 2; }
  StepOutput step(int64_t step, BatchSlice rows) override {
    if (step == interrupt_at) std::raise(SIGINT);
    auto [loss, aux] = forward_loss(batch(step).narrow(0, rows.begin, rows.size()).contiguous());
    const int64_t targets = rows.size() * 6;
    return {training_loss(loss, aux, targets), loss.item(), targets};
  }
  Metrics evaluate() override { return {{"loss", forward_loss(batch(1000)).first.item()}}; }
  std::string unit() const override { return "tok"; }
  int64_t interrupt_at = -1;

 private:
  std::pair<Tensor, std::vector<AuxLoss>> forward_loss(const Tensor& rows) {
    Tensor tokens = on_model_device(rows);
    ModelOutput out = model_->forward(tokens.narrow(1, 0, 6));
    return {cross_entropy(out.out.reshape({-1, 8}), tokens.narrow(1, 1, 6).reshape({-1})), out.aux_losses};
  }
  Tensor batch(int64_t step) const { return testing::counting_rows(seed_, step); }
};

TrainOptions small_run(const std::string& ckpt_dir, const std::string& device) {
  TrainOptions o;
  o.steps = 8, o.warmup = 2, o.lr = 1e-2, o.eval_every = 4, o.ckpt_every = 4, o.ckpt_dir = ckpt_dir;
  o.bcd_f = 2, o.bcd_g = 2, o.quiet = true, o.device = device;
  return o;
}

}  // namespace

TEST_CASE("cuda train: --device cuda follows the CPU run, reports device memory, and resumes on the CPU") {
  for (const std::string attention : {"moh", "mae"}) {  // AdamW, and MAE's two optimizers under BCD
    CAPTURE(attention);
    TempDir cpu_dir("cuda_train_cpu"), cuda_dir("cuda_train_cuda");
    CountingLmTask on_cpu(attention);
    TrainResult whole = train(on_cpu, small_run(cpu_dir.file("run"), "cpu"));

    CountingLmTask on_cuda(attention);
    on_cuda.interrupt_at = 3;  // Ctrl-C during step 3: it finishes, the loop saves at step 4 and stops
    TrainResult first = train(on_cuda, small_run(cuda_dir.file("run"), "cuda"));
    CHECK(first.interrupted);
    CHECK(first.last_step == 4);
    CHECK(first.peak_bytes > 0);  // the CUDA allocator's peak
    CHECK(on_cuda.model().device() == Device::cuda());

    CountingLmTask resumed(attention);
    TrainOptions rest = small_run(cuda_dir.file("run"), "cpu");
    rest.resume = true;
    TrainResult second = train(resumed, rest);
    CHECK(second.first_step == 4);
    CHECK(resumed.model().device() == Device::cpu());

    std::vector<double> losses = first.train_loss;
    losses.insert(losses.end(), second.train_loss.begin(), second.train_loss.end());
    CHECK_CLOSE(losses, whole.train_loss, 1e-5, 1e-3);
    CHECK(second.eval[0].second == doctest::Approx(whole.eval[0].second).epsilon(1e-3));
  }
}
