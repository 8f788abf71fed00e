#pragma once
// Neural-network ops: softmax, normalisation, dropout, embedding and the
// cross-entropy loss.  Each is one fused kernel with its own backward (not a
// composition of elementwise ops), for f32 and f64 (indices and targets are
// i32).  Inputs may be non-contiguous.
#include <cstdint>

#include "headroom/core/rng.h"
#include "headroom/core/tensor.h"

namespace headroom {

// x: [...]; out: same shape.  Normalises over `dim`, subtracting the max first
// so that exp never overflows.  A slice that is all -inf gives softmax 0 (not
// the 0/0 NaN of PyTorch) and log_softmax -inf.
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

// x: [..., D]; weight, bias: [D], or undefined Tensor() for no affine.
//   out = (x - mean) / sqrt(var + eps) * weight + bias
// over the last dimension, with the biased variance (as PyTorch).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// x: [..., D]; weight: [D] or undefined.
//   out = x / sqrt(mean(x²) + eps) * weight        (mean over the last dimension)
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// Inverted dropout: zeroes element i when gen.uniform_at(first + i) < p, where
// first = gen.reserve(x.numel()) and i counts x's elements in row-major order,
// and scales the kept ones by 1 / (1 - p).  Returns x itself when !training
// or p == 0 (and then draws nothing).  p must lie in [0, 1).  The backward
// regenerates the mask from the generator's seed instead of storing it.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
Tensor dropout(const Tensor& x, double p, bool training);  // default_generator()

// weight: [V, D]; indices: i32 [...] with values in [0, V); out: [..., D].
// Row i of out is weight[indices[i]].  The gradient of weight sums the rows of
// repeated indices in index order (deterministic).  indices get no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices);

enum class Reduction { mean, sum, none };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;  // targets equal to this contribute no loss and no gradient
  double label_smoothing = 0;   // in [0, 1]
  Reduction reduction = Reduction::mean;
};

// logits: [N, C] or [..., C] (classes in the LAST dimension; PyTorch puts them
// in dimension 1 for inputs of more than two dimensions); targets: i32 [N] or
// [...], each in [0, C) or equal to ignore_index.  Per sample, with
// p = softmax(logits) and ε = label_smoothing:
//   loss = (1 - ε) * (-log p[target]) + ε * mean over classes of (-log p[c])
// Reduction::none returns [...] (0 at ignored targets); sum returns a scalar;
// mean divides the sum by the number of non-ignored targets.
//
// When every target is ignored, mean returns 0 where PyTorch 1.13 returns NaN
// (0/0): a batch that happens to be all padding then adds nothing to a
// training run instead of poisoning it.  The gradient is 0 in both.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const CrossEntropyOptions& opts = CrossEntropyOptions());

}  // namespace headroom
