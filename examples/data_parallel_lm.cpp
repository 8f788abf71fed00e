// A complete data-parallel training program on the library's API alone
// (docs/distributed.md): a small decoder LM with MoA attention and dropout
// learns to continue counting sequences, on as many ranks as mpirun starts.
// It trains as one process would on the same global batch, whatever the
// number of ranks.  Built where the MPI part is.
//
//   mpirun -np 2 build/release/examples/data_parallel_lm
//
// Exit status 0 when the loss fell and the ranks' parameters agree.
#include <cstdio>
#include <exception>
#include <vector>

#include "headroom/distributed/mpi.h"
#include "headroom/headroom.h"

using namespace headroom;

namespace {

constexpr int64_t kVocab = 16, kLength = 12, kGlobalRows = 8, kSteps = 60;

// The global batch of `step`: kGlobalRows sequences of kLength + 1 tokens
// counting mod kVocab from random starts.  A pure function of the step, so
// every rank builds the same one.  i32 [kGlobalRows, kLength + 1].
Tensor counting_batch(int64_t step) {
  Generator data(1000 + uint64_t(step));
  std::vector<int32_t> ids;
  for (int64_t row = 0; row < kGlobalRows; ++row) {
    const int64_t start = data.next_int(kVocab);
    for (int64_t t = 0; t <= kLength; ++t) ids.push_back(int32_t((start + t) % kVocab));
  }
  return Tensor::from_vector(ids, {kGlobalRows, kLength + 1});
}

ModelConfig model_config() {
  ModelConfig config;
  config.vocab = kVocab;
  config.dim = 32;
  config.heads = 4;
  config.decoder_layers = 2;
  config.ffn_hidden = 64;
  config.dropout = 0.1;
  config.attention.type = "moa";  // its load-balance loss sees the global batch
  return config;
}

int train() {
  auto world = mpi_world();  // MPI_Init on the first call, MPI_Finalize with the last handle
  const ModelConfig config = model_config();
  Generator gen(1);  // initialisation, dropout and MoA's sampling
  DecoderLM lm(config, gen);
  DataParallel parallel(lm, world);  // checks the ranks' layouts, broadcasts rank 0's parameters
  AdamW optimizer(lm.parameters(), 3e-3);
  const BatchSlice mine = parallel.slice(kGlobalRows);  // this rank's rows
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    RowShareScope share(gen, mine, kGlobalRows);  // this rank draws its rows' dropout masks
    optimizer.zero_grad();
    Tensor rows = counting_batch(step).narrow(0, mine.begin, mine.size()).contiguous();  // [rows, T + 1]
    Tensor inputs = rows.narrow(1, 0, kLength).contiguous(), targets = rows.narrow(1, 1, kLength).contiguous();
    ModelOutput out = lm.forward(inputs);
    Tensor loss = cross_entropy(out.out, targets);  // mean over this rank's target tokens
    const int64_t tokens = mine.size() * kLength;
    training_loss(loss, out.aux_losses, tokens).backward();
    parallel.synchronize_gradients(double(tokens));  // the global batch's gradient on every rank
    clip_grad_norm(lm.parameters(), 1.0);
    optimizer.step();
    last_loss = parallel.mean(loss.item(), double(tokens));  // the global batch's loss
    if (step == 0) first_loss = last_loss;
    if (world->rank() == 0 && step % 10 == 0) std::printf("step %lld: loss %.4f\n", (long long)step, last_loss);
  }
  parallel.check_parameters_identical();  // throws naming the ranks that drifted
  if (world->rank() == 0)
    std::printf("loss %.4f -> %.4f on %d rank(s); parameters identical on every rank\n", first_loss, last_loss,
                world->size());
  return last_loss < first_loss ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return train();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    mpi_abort(1);  // the other ranks may wait for this one in a collective
  }
}
