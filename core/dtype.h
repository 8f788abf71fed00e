#pragma once
// Element types.  f32 is the default; f64 serves gradchecks and users who want
// it (CPU only); i32 holds indices; b8 holds masks (one byte per element, 0/1).
#include <cstddef>
#include <cstdint>
#include <ostream>

namespace headroom {

enum class DType : uint8_t { f32, f64, i32, b8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::b8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::b8: return "b8";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// The C++ type that stores each dtype, for templated kernels.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::b8; };

}  // namespace headroom
