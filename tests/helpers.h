#pragma once
// Shared helpers for the tests: comparisons that print the first mismatches
// and the largest difference (as llm.c's check_tensor does).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/headroom.h"

namespace headroom::testing {

// Parses `args`, a command line without the program's name, with a binary's
// Flags (examples/common/cli.h); returns what Flags::parse returns.
template <typename CommandLineFlags> bool parse_command_line(CommandLineFlags& flags, std::vector<std::string> args) {
  args.insert(args.begin(), "test");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  return flags.parse(static_cast<int>(argv.size()), argv.data());
}

// True when every |a - b| <= atol + rtol * |b| (equal infinities match, as
// in numpy's allclose); otherwise a message with the first few mismatches
// and the max difference.
inline std::string compare(const std::vector<double>& a, const std::vector<double>& b, double atol, double rtol) {
  if (a.size() != b.size()) return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  std::ostringstream os;
  double max_diff = 0;
  int shown = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double diff = a[i] == b[i] ? 0 : std::abs(a[i] - b[i]);  // inf - inf would be NaN
    bool bad = !(diff <= atol + rtol * std::abs(b[i]));      // NaN counts as bad
    if (bad && shown < 5) {
      os << "  [" << i << "] got " << a[i] << " expected " << b[i] << "\n";
      ++shown;
    }
    if (bad || diff > max_diff) max_diff = std::isnan(diff) ? INFINITY : std::max(max_diff, diff);
  }
  if (shown == 0) return "";
  return "mismatch (max diff " + std::to_string(max_diff) + "):\n" + os.str();
}

inline std::string compare(const Tensor& a, const Tensor& b, double atol, double rtol = 0) {
  if (a.shape() != b.shape()) return "shapes differ: " + shape_str(a.shape()) + " vs " + shape_str(b.shape());
  return compare(a.to_vector<double>(), b.to_vector<double>(), atol, rtol);
}

// Gradcheck (f64) through an attention module's parameters and its input:
// converts the module to f64, draws x [B, T, d] from `gen`, and checks
// `output(m.forward({x, no memory, causal, key_padding}))` (default: .out).
inline autograd::GradcheckResult gradcheck_attention(Attention& m, const Shape& x_shape, Generator& gen, bool causal,
                                                     const Tensor& key_padding,
                                                     const std::function<Tensor(const AttentionOutput&)>& output = {}) {
  m.to(DType::f64);
  Tensor x = Tensor::randn(x_shape, gen, DType::f64).set_requires_grad();
  std::vector<Tensor> inputs = m.parameters();
  inputs.push_back(x);
  return gradcheck(
      [&](const std::vector<Tensor>& in) {
        AttentionInput a{in.back(), Tensor(), causal};
        a.key_padding = key_padding;
        AttentionOutput o = m.forward(a);
        return output ? output(o) : o.out;
      },
      inputs);
}

// A fresh, empty folder for one test, removed afterwards.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("headroom_" + name + "_" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
    std::filesystem::remove_all(path);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `bytes` to the file `name` (creating its folders) and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::filesystem::path target = path / name;
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary) << bytes;
    return target.string();
  }
  size_t count() const {
    return std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator());
  }
};

}  // namespace headroom::testing

// CHECK_CLOSE(a, b, atol[, rtol]) for tensors or vectors of doubles.
#define CHECK_CLOSE(a, b, ...)                                                       \
  do {                                                                               \
    std::string headroom_mismatch = ::headroom::testing::compare(a, b, __VA_ARGS__); \
    CHECK_MESSAGE(headroom_mismatch.empty(), headroom_mismatch);                     \
  } while (0)

// CHECK_THROWS_HEADROOM(expr, "substring"): expr throws headroom::Error whose
// message contains the substring.
#define CHECK_THROWS_HEADROOM(expr, substring) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(substring), ::headroom::Error)

namespace headroom::testing {

// One attention layer's output, aux loss and the gradients of
// L = Σ out·dout + aux with respect to every parameter (in order), then x.
struct LayerPass {
  Tensor out, aux;
  std::vector<Tensor> grads;
};

// Runs `layer` (its routed or its dense-reference path) on a fresh leaf copy
// of x_value; `shape` gives the rest of the input (memory, causal, masks).
template <typename Layer>
LayerPass layer_pass(Layer& layer, bool dense, const Tensor& x_value, const Tensor& dout, const AttentionInput& shape) {
  layer.zero_grad();
  Tensor x = x_value.detach().clone().set_requires_grad();
  AttentionInput in = shape;
  in.x = x;
  AttentionOutput o = dense ? layer.forward_dense_reference(in) : layer.forward(in);
  Tensor loss = sum(o.out * dout);
  if (o.aux.defined()) loss = loss + o.aux.value;
  loss.backward();
  LayerPass pass{o.out, o.aux.value, {}};
  for (const Tensor& p : layer.parameters()) pass.grads.push_back(p.grad());
  pass.grads.push_back(x.grad());
  return pass;
}

// Causal self-attention decoded chunk by chunk through one cache: the
// outputs for x [B, T, d] cut into `lengths` (summing to T), concatenated
// -> [B, T, d], to compare with the full forward.
inline Tensor decode_in_chunks(Attention& layer, const Tensor& x, const std::vector<int64_t>& lengths) {
  AttentionCache cache;
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t length : lengths) {
    AttentionInput chunk{x.narrow(1, start, length), Tensor(), true};
    chunk.cache = &cache;
    pieces.push_back(layer.forward(chunk).out);
    start += length;
  }
  return cat(pieces, 1);
}

// Same output, aux loss and gradients (a gradient may be undefined on both sides).
inline void check_same_pass(const LayerPass& a, const LayerPass& b, double tol) {
  CHECK_CLOSE(a.out, b.out, tol, tol);
  REQUIRE(a.aux.defined() == b.aux.defined());
  if (a.aux.defined()) CHECK_CLOSE(a.aux, b.aux, tol, tol);
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("gradient ", i);
    REQUIRE(a.grads[i].defined() == b.grads[i].defined());
    if (a.grads[i].defined()) CHECK_CLOSE(a.grads[i], b.grads[i], tol, tol);
  }
}

}  // namespace headroom::testing
