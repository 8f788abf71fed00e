#pragma once
// Tensor: a view (shape, strides, offset, dtype) over shared storage, plus the
// autograd fields.  Copying a Tensor copies a handle: both name the same
// TensorImpl, as in PyTorch.  Views (reshape, permute, slice, expand) make a
// new TensorImpl over the same Storage.
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "headroom/core/device.h"
#include "headroom/core/dtype.h"
#include "headroom/core/error.h"
#include "headroom/core/shape.h"

namespace headroom {

class Generator;
namespace autograd {
struct Node;
}

// One allocation on one device.  `version` is bumped by every in-place write,
// so autograd can tell when a tensor it saved for backward has changed.
struct Storage {
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  uint64_t version = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;               // set on leaves by the user
  std::shared_ptr<TensorImpl> grad;         // accumulated gradient of a leaf
  std::shared_ptr<autograd::Node> grad_fn;  // the op that made this tensor, if recorded
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation -------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::f32);  // shape ()
  // [start, end) in steps of step, like numpy.arange.  start, end and step
  // must be finite, and the range hold at most kMaxArangeElements (2^53:
  // past it, start + step * i is no longer exact in a double).
  static constexpr int64_t kMaxArangeElements = int64_t(1) << 53;
  static Tensor arange(double start, double end, double step = 1, DType dtype = DType::f32);
  static Tensor arange(int64_t end, DType dtype = DType::f32) { return arange(0, double(end), 1, dtype); }
  template <typename T> static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <typename T> static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, {static_cast<int64_t>(values.size())});
  }
  // Random tensors take one order: shape, generator, the distribution's
  // parameters, dtype.  Uniform in [low, high) and normal draws (rng.h
  // documents the stream); without a generator, default_generator().
  static Tensor rand(const Shape& shape, Generator& gen, double low, double high, DType dtype = DType::f32);
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32) {
    return rand(shape, gen, 0, 1, dtype);
  }
  static Tensor randn(const Shape& shape, Generator& gen, double mean, double stddev, DType dtype = DType::f32);
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32) {
    return randn(shape, gen, 0, 1, dtype);
  }
  static Tensor rand(const Shape& shape, DType dtype = DType::f32);
  static Tensor randn(const Shape& shape, DType dtype = DType::f32);
  // Uniform integers in [low, high), low < high, as i32, f32 or f64 values;
  // every integer of the range must be exact in the dtype (|v| <= 2^24 for
  // f32, 2^53 for f64).  Drawn on the CPU, then moved to `device`.
  static Tensor randint(const Shape& shape, Generator& gen, int64_t low, int64_t high, DType dtype = DType::i32,
                        Device device = Device::cpu());
  static Tensor randint(const Shape& shape, int64_t low, int64_t high, DType dtype = DType::i32,
                        Device device = Device::cpu());

  // ---- metadata -------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int dim() const { return static_cast<int>(impl().shape.size()); }
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  bool is_floating_point() const { return is_floating(dtype()); }
  // Row-major contiguous: strides equal contiguous_strides(shape), ignoring
  // dimensions of size 1 (their stride never matters).
  bool is_contiguous() const;

  // ---- data access (CPU tensors) --------------------------------------
  // Pointer to the first element (offset applied).  Checks that T matches the dtype.
  template <typename T> T* data() const;
  void* raw_data() const;  // any device
  double item() const;     // one-element tensors, any dtype, as double
  template <typename T> T item() const { return static_cast<T>(item()); }
  // Elements in row-major logical order, converted to T.
  template <typename T> std::vector<T> to_vector() const;
  std::string str() const;  // PyTorch-like printing

  // ---- storage --------------------------------------------------------
  TensorImpl* impl_ptr() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_shared() const { return impl_; }
  uint64_t version() const { return impl().storage->version; }
  void bump_version() const { ++impl().storage->version; }
  bool same_storage(const Tensor& other) const { return impl().storage == other.impl().storage; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- autograd (autograd/engine.cpp) ---------------------------------
  // True for leaves marked by set_requires_grad and for recorded op outputs.
  bool requires_grad() const { return impl().requires_grad || impl().grad_fn != nullptr; }
  Tensor& set_requires_grad(bool flag = true);  // leaves only, floating dtypes only
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const;  // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;  // drops the gradient (like PyTorch's set_to_none)
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // Seeds with ones for a one-element tensor; otherwise pass a seed of the same shape.
  void backward(const Tensor& seed = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no grad_fn, requires_grad false

  // ---- views and movement (ops/shape.cpp) -----------------------------
  Tensor reshape(const Shape& shape) const;  // a view of a contiguous tensor, else a copy; one dim may be -1
  Tensor view(const Shape& shape) const;     // always a view (strided too); throws if strides do not allow it
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of the last two dimensions
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // python semantics for negatives
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor expand(const Shape& shape) const;          // -1 keeps a size; stride 0 on broadcast dims
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;  // this tensor when already contiguous, else a copy
  Tensor clone() const;       // always a copy
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- in-place writes (no autograd; bump the version) -----------------
  // Refused on tensors that require grad while grad mode is on, because
  // autograd could not see the change; optimizers run under NoGradGuard.
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0); }
  Tensor& copy_(const Tensor& src);  // src broadcast to this shape, dtype converted

 private:
  TensorImpl& impl() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// A new TensorImpl viewing `base`'s storage with other metadata.
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);

// Throws "[op] inputs on different devices: cpu and cuda:0" unless all match.
void check_same_device(const char* op, const std::vector<Tensor>& tensors);
// Throws "[op] expected dtype f32 or f64, got i32" style errors.
void check_floating(const char* op, const Tensor& t, const char* what = "input");
// In-place writes are refused on tensors that require grad while grad mode is
// on: autograd could not see the change.
void check_inplace_allowed(const char* op, const Tensor& t);
void check_dtype(const char* op, const Tensor& t, DType expected, const char* what = "input");
// Kernels in this build exist for the CPU only; the CUDA issue adds the others.
void check_cpu(const char* op, const std::vector<Tensor>& tensors);

// Calls fn(T{}) with T = float or double, the C++ type of a floating dtype:
//   dispatch_floating(x.dtype(), [&](auto zero) { using T = decltype(zero); ... });
template <typename Fn> void dispatch_floating(DType dtype, Fn&& fn) {
  if (dtype == DType::f32) fn(float{});
  else fn(double{});
}

// The same for every dtype: T = float, double, int32_t or uint8_t.
template <typename Fn> void dispatch_any(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::i32: return fn(int32_t{});
    case DType::b8: return fn(uint8_t{});
  }
}

// t.data<T>(), or nullptr for an undefined (optional) tensor.
template <typename T> T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// Copies src's elements (any strides, broadcast to dst's shape) into dst,
// converting dtype.  The kernel behind contiguous(), clone(), to() and copy_().
void copy_elements(const Tensor& src, const Tensor& dst);
// dst += src element by element: one shape, one floating dtype, dst any
// strides (not expanded); bumps dst's version.  No autograd: the backward
// engine's gradient sums.
void accumulate_elements(const Tensor& src, const Tensor& dst);

// Visits every element of `shape` in row-major order, calling
// fn(offset_in_elements) with the offset given by `strides` (stride 0 on
// broadcast dimensions works).  The generic strided loop of the CPU kernels.
template <typename Fn> void for_each_offset(const Shape& shape, const Strides& strides, int64_t base, Fn&& fn) {
  const int nd = static_cast<int>(shape.size());
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<int64_t> index(nd, 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    fn(off);
    for (int d = nd - 1; d >= 0; --d) {  // odometer increment
      if (++index[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

// The same walk over two tensors of one shape: fn(offset_a, offset_b).
template <typename Fn>
void for_each_offset2(const Shape& shape, const Strides& strides_a, int64_t base_a, const Strides& strides_b,
                      int64_t base_b, Fn&& fn) {
  const int nd = static_cast<int>(shape.size());
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<int64_t> index(nd, 0);
  int64_t off_a = base_a, off_b = base_b;
  for (int64_t i = 0; i < n; ++i) {
    fn(off_a, off_b);
    for (int d = nd - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        off_a += strides_a[d];
        off_b += strides_b[d];
        break;
      }
      off_a -= strides_a[d] * (shape[d] - 1);
      off_b -= strides_b[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

// ---- template definitions ----------------------------------------------

template <typename T> T* Tensor::data() const {
  HEADROOM_CHECK(dtype_of<std::remove_const_t<T>>::value == dtype(), "[data] tensor has dtype ", dtype(),
                 " but was read as ", dtype_of<std::remove_const_t<T>>::value);
  return static_cast<T*>(raw_data());
}

}  // namespace headroom
