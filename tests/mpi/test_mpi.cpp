// The MPI part under mpirun (tests/CMakeLists.txt runs this binary with
// `mpirun --oversubscribe -np 2`): the collectives, and data-parallel
// training on two ranks against one process with the same global batch, for
// every attention type.  Every rank runs every case; the checks use CHECK,
// never REQUIRE, so that a failure on one rank leaves the ranks calling the
// same collectives (a rank that skipped one would leave the others waiting).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../transformer_helpers.h"
#include "headroom/distributed/mpi.h"
#include "headroom/headroom.h"

using namespace headroom;

namespace {

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> handle = mpi_world();  // MPI_Finalize at exit
  return handle;
}

ModelConfig model_config(const std::string& type) {
  ModelConfig c = testing::tiny_model_config(10);
  c.dim = 16, c.heads = 4, c.ffn_hidden = 32, c.decoder_layers = 2;
  c.dropout = c.attn_dropout = 0.1;  // every rank draws its slice's part of the one-process masks
  c.attention.type = type;
  if (type == "moa")
    c.attention.options = {{"experts", "4"}, {"k", "2"}, {"head_dim", "8"}, {"sample_topk", "1"}, {"w_cv", "0.01"}};
  if (type == "moh") c.attention.options = {{"shared_heads", "1"}, {"routed_k", "1"}};
  return c;
}

// The global batch of `step`: [8, 6] tokens and next-token labels, a pure
// function of the step (as the binaries' batches are of seed and step).
std::pair<Tensor, Tensor> global_batch(int64_t step) {
  Generator gen(1000 + uint64_t(step));
  Tensor tokens = Tensor::randint({8, 7}, gen, 1, 10);
  return {tokens.narrow(1, 0, 6).contiguous(), tokens.narrow(1, 1, 6).contiguous()};
}

// Trains a DecoderLM for `steps` on rows `mine` of each global batch and
// returns the global batch's mean loss per step.  MAE layers train by block
// coordinate descent, the others by AdamW; gradients are clipped after
// synchronize_gradients, as in the binaries.  `gen` is the model's
// generator: dropout, MoA's sampled experts and MAE's.
std::vector<double> train(DecoderLM& lm, Generator& gen, DataParallel& parallel, const BatchSlice& mine, int steps) {
  testing::ModelOptimizer opt(lm, 3e-3, BCDOptions{0, 4, 3}, 0.01);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    RowShareScope share(gen, mine, 8);
    opt.begin(step);
    auto [tokens, labels] = global_batch(step);
    ModelOutput out = lm.forward(tokens.narrow(0, mine.begin, mine.size()).contiguous());
    Tensor task = cross_entropy(out.out, labels.narrow(0, mine.begin, mine.size()).contiguous());
    const int64_t targets = mine.size() * labels.size(1);
    training_loss(task, out.aux_losses, targets).backward();
    parallel.synchronize_gradients(double(targets));
    clip_grad_norm(lm.parameters(), 1.0);
    opt.finish();
    losses.push_back(parallel.mean(task.item(), double(targets)));
  }
  return losses;
}

}  // namespace

TEST_CASE("mpi: the collectives sum, average, broadcast and gather over the ranks") {
  Communicator& comm = *world();
  CHECK(comm.backend() == "mpi");
  CHECK(comm.size() == 2);
  const int r = comm.rank();
  Tensor x = Tensor::from_vector<float>({float(r + 1), float(10 * (r + 1))});
  comm.all_reduce(x);
  CHECK(x.to_vector<float>() == std::vector<float>{3, 30});
  Tensor m = Tensor::from_vector<double>({double(r)});
  comm.all_reduce(m, ReduceOp::mean);
  CHECK(m.item() == 0.5);
  Tensor b = Tensor::from_vector<int32_t>({r == 1 ? 7 : 0, r});
  comm.broadcast(b, 1);
  CHECK(b.to_vector<int32_t>() == std::vector<int32_t>{7, 1});
  Tensor gathered = comm.all_gather(Tensor::from_vector<float>({float(r), float(r)}));
  CHECK(gathered.shape() == Shape{2, 2});
  CHECK(gathered.to_vector<float>() == std::vector<float>{0, 0, 1, 1});
  comm.barrier();
  Tensor strided = Tensor::zeros({2, 3}).t();
  CHECK_THROWS_WITH_AS(comm.all_reduce(strided), doctest::Contains("needs a contiguous tensor"), Error);
  CHECK_THROWS_WITH_AS(comm.broadcast(b, 2), doctest::Contains("root must be a rank in [0, 2), got 2"), Error);
}

// With the model generator's draws shared out by rows and the routed layers'
// auxiliary losses over the global batch, every method's step on two ranks
// is one process's step up to summation order (in f64: in f32, AdamW's first
// steps amplify summation-order differences of near-zero gradients).
TEST_CASE("mpi: two ranks train every attention type as one process does with the same global batch") {
  for (const std::string type : {"mha", "moa", "moh", "mae"}) {
    CAPTURE(type);
    const int steps = 20;
    // One process with the whole batch (each rank runs it alone).
    Generator alone_gen(5);
    DecoderLM alone(model_config(type), alone_gen);
    alone.to(DType::f64);
    const uint64_t trained_from = alone_gen.offset();
    DataParallel one(alone, std::make_shared<LocalCommunicator>());
    const std::vector<double> expected = train(alone, alone_gen, one, {0, 8}, steps);
    // Two ranks, each with half; rank 1 starts from other weights, which rank 0's broadcast
    // replaces; the model generators agree, as the binaries' (seeded alike) do.
    Generator gen(world()->rank() == 0 ? 5 : 77);
    DecoderLM lm(model_config(type), gen);
    lm.to(DType::f64);
    gen.set_state(5, trained_from);
    DataParallel parallel(lm, world());
    const std::vector<double> losses = train(lm, gen, parallel, parallel.slice(8), steps);
    double largest_loss_difference = 0;
    for (int step = 0; step < steps; ++step) {
      CAPTURE(step);
      const double relative = std::abs(losses[size_t(step)] / expected[size_t(step)] - 1);
      largest_loss_difference = std::max(largest_loss_difference, relative);
      CHECK(relative < 1e-9);
    }
    CHECK_NOTHROW(parallel.check_parameters_identical());
    double largest_difference = 0;
    const NamedTensors mine = lm.state_dict(), theirs = alone.state_dict();
    for (size_t i = 0; i < mine.size(); ++i)
      largest_difference = std::max(largest_difference, max(abs(mine[i].second - theirs[i].second)).item());
    MESSAGE(type, " after ", steps, " steps on 2 ranks: losses within ", largest_loss_difference,
            " (relative) of one process, parameters within ", largest_difference);
    CHECK(largest_difference < 1e-8);
  }
}

TEST_CASE("mpi: a rank whose parameters differ is named") {
  Generator gen(3);
  DecoderLM lm(model_config("mha"), gen);
  DataParallel parallel(lm, world());
  check_same_on_every_rank(*world(), "config", "dim=16");
  {
    NoGradGuard no_grad;
    if (world()->rank() == 1) lm.parameters().front().fill_(0.5);
  }
  CHECK_THROWS_WITH_AS(parallel.check_parameters_identical(), doctest::Contains("parameters of rank(s) 1 differ"),
                       Error);
  CHECK_THROWS_WITH_AS(check_same_on_every_rank(*world(), "config", "rank " + std::to_string(world()->rank())),
                       doctest::Contains("rank(s) 1 disagree with rank 0 on the config"), Error);
}

TEST_CASE("mpi: ranks whose models differ in shape are refused before the broadcast") {
  Generator gen(3);
  ModelConfig config = model_config("mha");
  if (world()->rank() == 1) config.decoder_layers += 1;
  DecoderLM lm(config, gen);
  CHECK_THROWS_WITH_AS(
      DataParallel(lm, world()),
      doctest::Contains("rank(s) 1 disagree with rank 0 on the model (state_dict names, shapes and dtypes)"), Error);
}

// Run by tests/mpi/killed_rank.sh with --no-skip: rank 1 dies in the middle
// of training; mpirun must then end rank 0 (blocked in a collective) and exit
// with an error naming the rank, within the script's bound.
TEST_CASE("mpi: a killed rank ends the job" * doctest::skip()) {
  Generator gen(3);
  DecoderLM lm(model_config("mha"), gen);
  DataParallel parallel(lm, world());
  for (int step = 0; step < 1000; ++step) {
    if (step == 3 && world()->rank() == 1) kill(getpid(), SIGKILL);
    parallel.mean(1.0);
  }
}

int main(int argc, char** argv) {
  world();
  doctest::Context context(argc, argv);
  return context.run();
}
