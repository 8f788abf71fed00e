#include "headroom/models/data_parallel.h"

#include <string>
#include <utility>

#include "headroom/core/error.h"
#include "headroom/core/grad_mode.h"
#include "headroom/core/safetensors.h"
#include "headroom/models/attention.h"
#include "headroom/ops/elementwise.h"

namespace headroom {

namespace {

// A checksum as a one-element i32 tensor, for the collectives (which carry tensors).
Tensor as_i32(uint32_t checksum) { return Tensor::from_vector<int32_t>({int32_t(checksum)}, {1}); }

// The gradients of one bucket: consecutive parameters of one dtype and device.
struct Bucket {
  std::vector<Tensor> params;
  int64_t elements = 0;
};

std::vector<Bucket> gradient_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  for (const Tensor& p : params) {
    const bool fits = !buckets.empty() && buckets.back().params.front().dtype() == p.dtype() &&
                      buckets.back().params.front().device() == p.device() &&
                      (buckets.back().elements + p.numel()) * int64_t(dtype_size(p.dtype())) <= bucket_bytes;
    if (!fits) buckets.emplace_back();
    buckets.back().params.push_back(p);
    buckets.back().elements += p.numel();
  }
  return buckets;
}

// all-reduces one bucket's gradients, each scaled by `scale` first; the
// parameters' gradients become views of the reduced buffer.
void reduce_bucket(Communicator& communicator, const Bucket& bucket, double scale) {
  const Tensor& first = bucket.params.front();
  Tensor flat = Tensor::empty({bucket.elements}, first.dtype(), first.device());
  int64_t offset = 0;
  for (const Tensor& p : bucket.params) {
    Tensor slot = flat.narrow(0, offset, p.numel());
    if (p.grad().defined()) slot.copy_(p.grad().reshape({p.numel()}));
    else slot.zero_();
    offset += p.numel();
  }
  flat = flat * scale;
  communicator.all_reduce(flat, ReduceOp::sum);
  offset = 0;
  for (const Tensor& p : bucket.params) {
    p.set_grad(flat.narrow(0, offset, p.numel()).view(p.shape()));
    offset += p.numel();
  }
}

// "1, 3": the ranks whose `checksum` is not rank 0's; empty when all agree.
std::string ranks_differing_from_root(Communicator& communicator, uint32_t checksum) {
  const Tensor all = communicator.all_gather(as_i32(checksum));  // [size, 1]
  const int32_t* checksums = all.data<int32_t>();
  std::string differing;
  for (int r = 1; r < communicator.size(); ++r)
    if (checksums[r] != checksums[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  return differing;
}

// Names, shapes and dtypes of the state_dict, one entry a line.
std::string state_layout(const Module& model) {
  std::string layout;
  for (const auto& [name, tensor] : model.state_dict())
    layout += name + " " + shape_str(tensor.shape()) + " " + dtype_name(tensor.dtype()) + "\n";
  return layout;
}

}  // namespace

BatchSlice batch_slice(int64_t global_rows, int rank, int ranks) {
  HEADROOM_CHECK(ranks > 0 && rank >= 0 && rank < ranks, "[batch_slice] rank ", rank, " is not in [0, ", ranks, ")");
  HEADROOM_CHECK(global_rows >= ranks, "[batch_slice] a global batch of ", global_rows, " rows cannot give each of ",
                 ranks, " ranks a row; use a batch of at least ", ranks);
  const int64_t base = global_rows / ranks, extra = global_rows % ranks;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

uint32_t parameters_checksum(const Module& model) {
  uint32_t crc = 0;
  for (const auto& [name, tensor] : model.state_dict()) {
    const Tensor host = tensor.to(Device::cpu()).contiguous();
    crc = crc32_update(crc, name.data(), name.size());
    crc = crc32_update(crc, host.raw_data(), size_t(host.numel()) * dtype_size(host.dtype()));
  }
  return crc;
}

DataParallel::DataParallel(Module& model, std::shared_ptr<Communicator> communicator, int64_t bucket_bytes)
    : model_(model), communicator_(std::move(communicator)), bucket_bytes_(bucket_bytes) {
  HEADROOM_CHECK(communicator_ != nullptr, "[DataParallel] got no communicator");
  HEADROOM_CHECK(bucket_bytes_ > 0, "[DataParallel] bucket_bytes must be positive, got ", bucket_bytes_);
  if (size() == 1) return;
  check_same_on_every_rank(*communicator_, "model (state_dict names, shapes and dtypes)", state_layout(model_));
  for (const auto& layer : collect_modules<Attention>(model_)) layer->set_statistics_group(communicator_);
  NoGradGuard no_grad;
  for (auto& entry : model_.state_dict()) {
    Tensor& tensor = entry.second;
    Tensor buffer = tensor.contiguous();
    communicator_->broadcast(buffer, 0);
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }
}

DataParallel::~DataParallel() {
  if (size() == 1) return;
  for (const auto& layer : collect_modules<Attention>(model_)) layer->set_statistics_group(nullptr);
}

RowShareScope::RowShareScope(Generator& generator, BatchSlice slice, int64_t global_rows) : generator_(generator) {
  generator_.share_rows(uint64_t(slice.begin), uint64_t(slice.size()), uint64_t(global_rows));
}

void DataParallel::synchronize_gradients(double weight) {
  HEADROOM_CHECK(weight >= 0, "[DataParallel] a rank's weight must be at least 0, got ", weight);
  if (size() == 1) return;
  NoGradGuard no_grad;
  const std::vector<Tensor> params = model_.parameters();
  // One small all-reduce first: which parameters any rank has a gradient for, and the total weight.
  Tensor has_grad = Tensor::zeros({int64_t(params.size()) + 1}, DType::f64);
  double* counts = has_grad.data<double>();
  for (size_t i = 0; i < params.size(); ++i) counts[i] = params[i].grad().defined() ? 1 : 0;
  counts[params.size()] = weight;
  communicator_->all_reduce(has_grad, ReduceOp::sum);
  const double total_weight = counts[params.size()];
  HEADROOM_CHECK(total_weight > 0, "[DataParallel] the ranks' weights add up to ", total_weight,
                 "; at least one "
                 "rank must weigh more than 0");
  std::vector<Tensor> reduced;
  for (size_t i = 0; i < params.size(); ++i)
    if (counts[i] > 0) reduced.push_back(params[i]);
  for (const Bucket& bucket : gradient_buckets(reduced, bucket_bytes_))
    reduce_bucket(*communicator_, bucket, weight / total_weight);
}

std::vector<double> DataParallel::sum(const std::vector<double>& values) const {
  if (size() == 1) return values;
  Tensor sums = Tensor::from_vector<double>(values, {int64_t(values.size())});
  communicator_->all_reduce(sums, ReduceOp::sum);
  return sums.to_vector<double>();
}

double DataParallel::mean(double value, double weight) const {
  const std::vector<double> sums = sum({value * weight, weight});
  HEADROOM_CHECK(sums[1] > 0, "[DataParallel] the ranks' weights add up to ", sums[1]);
  return sums[0] / sums[1];
}

void DataParallel::check_parameters_identical() const {
  if (size() == 1) return;
  const std::string differing = ranks_differing_from_root(*communicator_, parameters_checksum(model_));
  HEADROOM_CHECK(differing.empty(), "[DataParallel] the parameters of rank(s) ", differing,
                 " differ from rank 0's (checksum); the ranks no longer train one model");
}

void check_same_on_every_rank(Communicator& communicator, const std::string& what, const std::string& text) {
  const std::string differing = ranks_differing_from_root(communicator, crc32_update(0, text.data(), text.size()));
  HEADROOM_CHECK(differing.empty(), "[DataParallel] rank(s) ", differing, " disagree with rank 0 on the ", what);
}

}  // namespace headroom
