#pragma once
// Data-parallel training over a Communicator (docs/distributed.md): every
// rank holds the whole model, computes one slice of each global batch, and
// the ranks average their gradients before clipping and the update, so they
// take the same step and stay identical.  In a training loop:
//
//     auto world = mpi_world();                 // distributed/mpi.h
//     DataParallel parallel(model, world);      // rank 0's parameters to all
//     const BatchSlice mine = parallel.slice(global_batch);
//     for (int64_t step = 0; step < steps; ++step) {
//       opt.zero_grad();
//       Tensor loss = model_loss(batch(step).narrow(0, mine.begin, mine.size()));
//       loss.backward();
//       parallel.synchronize_gradients();       // the global batch's gradient
//       clip_grad_norm(model.parameters(), 1.0);
//       opt.step();
//     }
//     parallel.check_parameters_identical();   // e.g. at every checkpoint
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "headroom/core/communicator.h"
#include "headroom/core/rng.h"
#include "headroom/models/module.h"

namespace headroom {

// The rows [begin, end) of a global batch that one rank computes.
struct BatchSlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The rows of `rank`: the global batch cut into `ranks` nearly equal runs in
// rank order (the first global % ranks ranks get one row more).  Throws when
// there are fewer rows than ranks.
BatchSlice batch_slice(int64_t global_rows, int rank, int ranks);

// The CRC-32 of the parameters' and buffers' names and bytes in state_dict
// order (crc32_update): equal on two ranks when their models are bitwise
// equal, and different, but for a 1 in 2^32 chance, when they are not.
uint32_t parameters_checksum(const Module& model);

// Throws naming the ranks whose `text` (e.g. a run's settings) differs from
// rank 0's (by CRC-32); `what` names it in the message.  A collective: every
// rank calls it.
void check_same_on_every_rank(Communicator& communicator, const std::string& what, const std::string& text);

// While alive, `generator` draws as the ranks' `slice` of a batch of
// `global_rows` rows (Generator::share_rows): dropout masks and sampled
// experts of the slices together are those of one process on the whole
// batch.  For the model generator around each training step.
class RowShareScope {
 public:
  RowShareScope(Generator& generator, BatchSlice slice, int64_t global_rows);
  ~RowShareScope() { generator_.clear_row_share(); }
  RowShareScope(const RowShareScope&) = delete;
  RowShareScope& operator=(const RowShareScope&) = delete;

 private:
  Generator& generator_;
};

class DataParallel {
 public:
  // Checks that every rank's model has the same state_dict names, shapes
  // and dtypes, then broadcasts rank 0's parameters and buffers to every
  // rank, so all start equal.  `bucket_bytes`: gradients are all-reduced in buckets of about
  // this many bytes (fewer, larger messages than one per parameter).
  // With more than one rank it also makes the ranks the statistics group of
  // every attention layer (Attention::set_statistics_group), so routed
  // layers' auxiliary losses see the global batch, until it is destroyed.
  DataParallel(Module& model, std::shared_ptr<Communicator> communicator, int64_t bucket_bytes = int64_t(8) << 20);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Communicator& communicator() const { return *communicator_; }
  int rank() const { return communicator_->rank(); }
  int size() const { return communicator_->size(); }
  BatchSlice slice(int64_t global_rows) const { return batch_slice(global_rows, rank(), size()); }

  // After backward: every parameter's gradient becomes the weighted mean over
  // the ranks, sum_r w_r g_r / sum_r w_r, with `weight` this rank's w_r: the
  // number of items its loss averages over (its target tokens), or 1 when
  // every rank's slice holds as many.  A parameter no rank has a gradient for
  // keeps none; one only some ranks have gets zeros on the others first.
  void synchronize_gradients(double weight = 1);

  // Each value summed over the ranks, in one all-reduce (e.g. a loss times
  // its items, the items, a stop flag); and the global mean of a per-rank
  // value weighted as above (e.g. the loss).
  std::vector<double> sum(const std::vector<double>& values) const;
  double mean(double value, double weight = 1) const;

  // Throws headroom::Error naming the ranks whose parameters differ from
  // rank 0's (parameters_checksum); cheap, for every checkpoint.
  void check_parameters_identical() const;

 private:
  Module& model_;
  std::shared_ptr<Communicator> communicator_;
  int64_t bucket_bytes_;
};

}  // namespace headroom
