#include "headroom/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "headroom/core/grad_mode.h"
#include "headroom/core/backend.h"
#include "headroom/core/parallel.h"
#include "headroom/core/rng.h"

namespace headroom {

namespace autograd {
namespace {
thread_local bool grad_mode = true;
}
bool grad_enabled() { return grad_mode; }
void set_grad_enabled(bool enabled) { grad_mode = enabled; }
}  // namespace autograd

// ---- storage ----------------------------------------------------------------

Storage::Storage(size_t bytes, Device dev) : nbytes(bytes), device(dev) {
  data = backend(dev).allocate(bytes, dev.index);
}

Storage::~Storage() {
  if (data) backend(device).deallocate(data, nbytes, device.index);
}

TensorImpl& Tensor::impl() const {
  HEADROOM_CHECK(impl_ != nullptr, "[tensor] use of an undefined tensor");
  return *impl_;
}

// ---- creation -----------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) HEADROOM_CHECK(s >= 0, "[empty] negative dimension in shape ", shape_str(shape));
  const int64_t numel = shape_numel(shape);
  const auto element_bytes = static_cast<int64_t>(dtype_size(dtype));
  HEADROOM_CHECK(numel <= std::numeric_limits<int64_t>::max() / element_bytes, "[empty] shape ", shape_str(shape),
                 " of ", dtype_name(dtype), " needs more bytes than an int64 can count");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(numel * element_bytes), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  backend(device).fill_zero(t.raw_data(), t.impl().storage->nbytes, device.index);
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

namespace {

double read_element(const void* base, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::f64: return static_cast<const double*>(base)[offset];
    case DType::i32: return static_cast<const int32_t*>(base)[offset];
    case DType::b8: return static_cast<const uint8_t*>(base)[offset];
  }
  return 0;
}

}  // namespace

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  // On a GPU a fill kernel, not a copy from the host: scalars such as the 2
  // in x * 2 are made on every call, and a copy would wait for the device.
  backend(device).fill(t, value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  HEADROOM_CHECK(step != 0, "[arange] step must be non-zero");
  HEADROOM_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "[arange] start ", start, ", end ",
                 end, " and step ", step, " must be finite");
  const double count = std::ceil((end - start) / step);
  HEADROOM_CHECK(count <= double(kMaxArangeElements), "[arange] the range from ", start, " to ", end, " by ", step,
                 " has ", count, " elements, more than the ", kMaxArangeElements, " arange makes");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    double v = start + step * double(i);
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = float(v); break;
      case DType::f64: t.data<double>()[i] = v; break;
      case DType::i32: t.data<int32_t>()[i] = int32_t(v); break;
      case DType::b8: t.data<uint8_t>()[i] = v != 0; break;
    }
  }
  return t;
}

template <typename T> Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  HEADROOM_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "[from_vector] ", values.size(),
                 " values cannot fill shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor t = empty(shape, dtype_of<T>::value);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<uint8_t>&, const Shape&);

Tensor Tensor::rand(const Shape& shape, Generator& gen, double low, double high, DType dtype) {
  check_floating("rand", Tensor::empty({0}, dtype), "dtype");
  Tensor t = empty(shape, dtype);
  uint64_t first = gen.reserve(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u = dtype == DType::f32 ? gen.uniform_at(first + i) : gen.uniform64_at(first + i);
    double v = low + (high - low) * u;
    if (dtype == DType::f32) t.data<float>()[i] = float(v);
    else t.data<double>()[i] = v;
  }
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, double mean, double stddev, DType dtype) {
  check_floating("randn", Tensor::empty({0}, dtype), "dtype");
  Tensor t = empty(shape, dtype);
  // Box-Muller: draws 2i and 2i+1 give element i.
  uint64_t first = gen.reserve(2 * t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u1 = 1.0 - gen.uniform64_at(first + 2 * i);
    double u2 = gen.uniform64_at(first + 2 * i + 1);
    double v = mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    if (dtype == DType::f32) t.data<float>()[i] = float(v);
    else t.data<double>()[i] = v;
  }
  return t;
}

Tensor Tensor::randint(const Shape& shape, Generator& gen, int64_t low, int64_t high, DType dtype, Device device) {
  HEADROOM_CHECK(low < high, "[randint] got low = ", low, " and high = ", high,
                 ", expected low < high (values are drawn from [low, high))");
  HEADROOM_CHECK(dtype != DType::b8, "[randint] expected dtype i32, f32 or f64, got ", dtype_name(dtype));
  // The integers the dtype holds exactly, all of them in between too.
  const int64_t largest = dtype == DType::i32 ? INT32_MAX : dtype == DType::f32 ? int64_t(1) << 24 : int64_t(1) << 53;
  const int64_t smallest = dtype == DType::i32 ? INT32_MIN : -largest;
  HEADROOM_CHECK(low >= smallest && high - 1 <= largest, "[randint] got [low, high) = [", low, ", ", high,
                 "), expected values in [", smallest, ", ", largest, "] for dtype ", dtype_name(dtype));
  Tensor t = empty(shape, dtype);
  const uint64_t range = uint64_t(high) - uint64_t(low);
  const uint64_t first = gen.reserve(t.numel());
  dispatch_any(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* out = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = T(low + int64_t(gen.bits_at(first + i) % range));
  });
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::rand(const Shape& shape, DType dtype) { return rand(shape, default_generator(), dtype); }
Tensor Tensor::randn(const Shape& shape, DType dtype) { return randn(shape, default_generator(), dtype); }
Tensor Tensor::randint(const Shape& shape, int64_t low, int64_t high, DType dtype, Device device) {
  return randint(shape, default_generator(), low, high, dtype, device);
}

// ---- metadata -----------------------------------------------------------------

int64_t Tensor::size(int64_t dim) const { return shape()[wrap_dim(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[wrap_dim(dim, this->dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data) + impl().offset * int64_t(dtype_size(dtype()));
}

double Tensor::item() const {
  HEADROOM_CHECK(numel() == 1, "[item] expected a tensor with one element, got shape ", shape_str(shape()));
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  return read_element(host.raw_data(), dtype(), 0);
}

template <typename T> std::vector<T> Tensor::to_vector() const {
  // A device tensor arrives contiguous: walk the copy with its own strides.
  if (!device().is_cpu()) return to(Device::cpu()).to_vector<T>();
  std::vector<T> out;
  out.reserve(numel());
  const void* base = impl().storage->data;
  DType dt = dtype();
  for_each_offset(shape(), strides(), offset(),
                  [&](int64_t off) { out.push_back(static_cast<T>(read_element(base, dt, off))); });
  return out;
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<uint8_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;

// ---- printing -----------------------------------------------------------------

namespace {

void print_dim(std::ostream& os, const Tensor& t, const std::vector<double>& values, int d, int64_t& next, int indent) {
  const int64_t n = t.size(d);
  const int64_t edge = 3;  // elements shown at each end of a long dimension
  const bool elide = n > 2 * edge + 1;
  int64_t inner = 1;
  for (int k = d + 1; k < t.dim(); ++k) inner *= t.size(k);
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (elide && i == edge) {
      os << "...";
      next += (n - 2 * edge) * inner;
      i = n - edge - 1;
      os << (d + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (d + 1 == t.dim()) {
      double v = values[next++];
      if (is_floating(t.dtype())) os << std::setprecision(4) << v;
      else os << static_cast<int64_t>(v);
    } else {
      print_dim(os, t, values, d + 1, next, indent + 1);
    }
    if (i + 1 < n) os << (d + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  std::vector<double> values = to_vector<double>();
  if (dim() == 0) {
    os << values[0];
  } else {
    int64_t next = 0;
    print_dim(os, *this, values, 0, next, 7);
  }
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype();
  if (!device().is_cpu()) os << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- helpers -------------------------------------------------------------------

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl_shared()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

void check_same_device(const char* op, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    HEADROOM_CHECK(t.device() == tensors[0].device(), "[", op, "] inputs on different devices: ", tensors[0].device(),
                   " and ", t.device());
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  HEADROOM_CHECK(t.is_floating_point(), "[", op, "] expected ", what, " of dtype f32 or f64, got ", t.dtype());
}

void check_dtype(const char* op, const Tensor& t, DType expected, const char* what) {
  HEADROOM_CHECK(t.dtype() == expected, "[", op, "] expected ", what, " of dtype ", expected, ", got ", t.dtype(),
                 " with shape ", shape_str(t.shape()));
}

void check_cpu(const char* op, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    HEADROOM_CHECK(!t.defined() || t.device().is_cpu(), "[", op, "] has no kernel for device ", t.device(),
                   " yet (CPU only)");
}

void copy_elements(const Tensor& src, const Tensor& dst) {
  check_same_device("copy", {src, dst});
  // Strides of src broadcast to dst's shape: 0 on new or size-1 dimensions.
  Shape target = broadcast_shapes(src.shape(), dst.shape(), "copy");
  HEADROOM_CHECK(target == dst.shape(), "[copy] source of shape ", shape_str(src.shape()),
                 " cannot be broadcast to destination shape ", shape_str(dst.shape()));
  Strides strides(dst.dim(), 0);
  for (int i = 0; i < src.dim(); ++i) {
    int d = dst.dim() - src.dim() + i;
    strides[d] = src.size(i) == 1 ? 0 : src.stride(i);
  }
  backend(dst.device()).copy(src, strides, dst);
}

void accumulate_elements(const Tensor& src, const Tensor& dst) {
  check_same_device("accumulate", {src, dst});
  HEADROOM_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype() && dst.is_floating_point(),
                 "[accumulate] expected two floating tensors of one shape and dtype, got ", shape_str(src.shape()), " ",
                 src.dtype(), " into ", shape_str(dst.shape()), " ", dst.dtype());
  for (int d = 0; d < dst.dim(); ++d)
    HEADROOM_CHECK(dst.stride(d) != 0 || dst.size(d) == 1, "[accumulate] target of shape ", shape_str(dst.shape()),
                   " is expanded (stride 0 in dimension ", d, ")");
  backend(dst.device()).accumulate(src, dst);
  dst.bump_version();
}

// ---- in-place writes -------------------------------------------------------------

void check_inplace_allowed(const char* op, const Tensor& t) {
  HEADROOM_CHECK(!(t.requires_grad() && autograd::grad_enabled()), "[", op,
                 "] in-place write to a tensor that requires grad (shape ", shape_str(t.shape()),
                 "); autograd could not track it: use NoGradGuard or an out-of-place op");
}

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed("fill_", *this);
  backend(device()).fill(*this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_allowed("copy_", *this);
  copy_elements(src, *this);
  bump_version();
  return *this;
}

}  // namespace headroom
