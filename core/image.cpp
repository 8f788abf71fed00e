#include "headroom/core/image.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "headroom/core/atomic_file.h"
#include "headroom/core/read_file.h"

// The only translation unit that sees stb's implementation.  STB_*_STATIC
// gives every stb function internal linkage (stb issues #917 and #1429);
// the warnings silenced here are about stb's code, not headroom's.  Only the
// PNG, JPEG and BMP decoders are compiled (no GIF, PSD, HDR, ... to attack),
// and stb itself refuses a side over kMaxImageSide.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
#define STBI_MAX_DIMENSIONS 16384
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace headroom {

namespace {

static_assert(STBI_MAX_DIMENSIONS == kMaxImageSide, "stb's limit is the documented one");

enum class ImageFormat { png, jpeg, bmp };

// The format a file's first bytes announce, whatever its name says.
ImageFormat sniff_format(const std::string& bytes, const std::string& path) {
  if (bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0) return ImageFormat::png;
  if (bytes.compare(0, 3, "\xFF\xD8\xFF") == 0) return ImageFormat::jpeg;
  if (bytes.compare(0, 2, "BM") == 0) return ImageFormat::bmp;
  HEADROOM_FAIL("[load_image] ", path, " is not a PNG, JPEG or BMP file (its first bytes are none of theirs)");
}

// Each side in [1, kMaxImageSide], read from the header before stb sees the
// file: stb reports a header it refuses only as "unknown image type".
void check_image_sides(const char* format, int64_t width, int64_t height, const std::string& path) {
  HEADROOM_CHECK(width > 0, "[load_image] ", path, ": the ", format, " header gives width 0");
  HEADROOM_CHECK(height > 0, "[load_image] ", path, ": the ", format, " header gives height 0");
  HEADROOM_CHECK(width <= kMaxImageSide && height <= kMaxImageSide, "[load_image] ", path, " is a ", width, "x", height,
                 " ", format, ", past the limit of ", kMaxImageSide, " pixels per side");
}

// A frame header (SOFn): every marker 0xC0..0xCF but DHT (C4), JPG (C8) and DAC (CC).
bool is_jpeg_frame_header(unsigned char marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

// The markers are walked as stb walks them.  A frame header's size must be
// within the limits.  stb_image 2.27 (Debian 12's) overruns its Huffman arrays
// on a DHT segment whose tables declare more than 256 codes (stb issue #1289,
// fixed in 2.28), so every table must have class 0..1, id 0..3, at most 256
// codes and its values inside the segment.
void check_jpeg_segments(const std::string& bytes, const std::string& path) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t pos = 2;  // after SOI
  while (pos + 3 < n) {
    const unsigned char marker = b[pos + 1];
    if (b[pos] != 0xFF || marker == 0xFF) {  // entropy-coded data, or a fill byte before a marker
      ++pos;
      continue;
    }
    if (marker == 0x00 || (marker >= 0xD0 && marker <= 0xD7)) {  // a stuffed 0xFF, or a restart marker
      pos += 2;
      continue;
    }
    if (marker == 0xD9) return;  // EOI
    const size_t end = std::min(n, pos + 2 + ((size_t(b[pos + 2]) << 8) | b[pos + 3]));
    if (is_jpeg_frame_header(marker) && pos + 8 < end)  // length, precision, height, width (big-endian)
      check_image_sides("JPEG", (b[pos + 7] << 8) | b[pos + 8], (b[pos + 5] << 8) | b[pos + 6], path);
    for (size_t t = pos + 4; marker == 0xC4 && t < end;) {  // DHT: tables until the segment's end
      size_t codes = 0;
      for (size_t i = 1; i <= 16 && t + i < end; ++i) codes += b[t + i];
      HEADROOM_CHECK((b[t] >> 4) <= 1 && (b[t] & 15) <= 3 && codes <= 256 && t + 17 + codes <= end, "[load_image] ",
                     path, " is a corrupt JPEG: a Huffman table (DHT at byte ", pos,
                     ") has a bad class, id or length, or more than 256 codes");
      t += 17 + codes;
    }
    pos = end;
  }
}

// The chunks up to the first IDAT (image data): the header (IHDR) gives the
// size, checked against the limits, and the colour type; a palette image
// (colour type 3) needs a PLTE chunk before its data.  stb 2.27 calls
// memcpy(NULL, ..., 0) (undefined behaviour) when the first IDAT chunk is
// empty; no encoder writes one, so such a file is refused.
void check_png_chunks(const std::string& bytes, const std::string& path) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  auto be32 = [&](size_t pos) {
    return (int64_t(b[pos]) << 24) | (int64_t(b[pos + 1]) << 16) | (int64_t(b[pos + 2]) << 8) | b[pos + 3];
  };
  int colour_type = -1;
  bool has_palette = false;
  for (size_t pos = 8; pos + 8 <= bytes.size();) {  // chunks: length (big-endian), type, data, CRC
    const size_t length = size_t(be32(pos));
    if (bytes.compare(pos + 4, 4, "IHDR") == 0 && length == 13 && pos + 21 <= bytes.size()) {
      // IHDR's data: width and height (big-endian), bit depth, colour type, ...
      check_image_sides("PNG", be32(pos + 8), be32(pos + 12), path);
      colour_type = b[pos + 17];
    }
    has_palette = has_palette || bytes.compare(pos + 4, 4, "PLTE") == 0;
    if (bytes.compare(pos + 4, 4, "IDAT") == 0) {
      HEADROOM_CHECK(length > 0, "[load_image] ", path, " is a corrupt PNG: its first IDAT chunk is empty");
      HEADROOM_CHECK(colour_type != 3 || has_palette, "[load_image] ", path,
                     " is a corrupt PNG: a palette PNG (colour type 3) has no PLTE chunk before its image data");
      return;
    }
    pos += 12 + length;
  }
}

}  // namespace

Tensor load_image(const std::string& path, int channels) {
  HEADROOM_CHECK(channels >= 0 && channels <= 4, "[load_image] channels must be 0 (as in the file) or 1..4, got ",
                 channels, ": ", path);
  const std::string bytes = read_regular_file(path, kMaxImageFileBytes, "load_image");
  const ImageFormat format = sniff_format(bytes, path);
  if (format == ImageFormat::jpeg) check_jpeg_segments(bytes, path);
  if (format == ImageFormat::png) check_png_chunks(bytes, path);
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int size = static_cast<int>(bytes.size());
  int width = 0, height = 0, file_channels = 0;
  HEADROOM_CHECK(stbi_info_from_memory(data, size, &width, &height, &file_channels) != 0, "[load_image] cannot load ",
                 path, ": ", stbi_failure_reason());
  HEADROOM_CHECK(int64_t(width) * height <= kMaxImagePixels, "[load_image] ", path, " is ", width, "x", height,
                 ", more than the ", kMaxImagePixels, " pixels an image may have");
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(data, size, &width, &height, &file_channels, channels), stbi_image_free);
  HEADROOM_CHECK(pixels != nullptr, "[load_image] cannot load ", path, ": ", stbi_failure_reason());
  const int c = channels == 0 ? file_channels : channels;
  Tensor image = Tensor::empty({height, width, c});  // [H, W, C]
  float* out = image.data<float>();
  const int64_t count = image.numel();
  for (int64_t i = 0; i < count; ++i) out[i] = pixels.get()[i] / 255.0f;
  return image;
}

void save_png(const std::string& path, const Tensor& image) {
  check_cpu("save_png", {image});
  check_floating("save_png", image, "image");
  HEADROOM_CHECK(image.dim() == 2 || (image.dim() == 3 && image.size(2) >= 1 && image.size(2) <= 4),
                 "[save_png] expected an image of shape [H, W] or [H, W, C] with C = 1..4, got ",
                 shape_str(image.shape()), ": ", path);
  HEADROOM_CHECK(image.numel() > 0, "[save_png] image of shape ", shape_str(image.shape()), " is empty: ", path);
  const int height = static_cast<int>(image.size(0)), width = static_cast<int>(image.size(1));
  const int channels = image.dim() == 3 ? static_cast<int>(image.size(2)) : 1;
  std::vector<double> values = image.to_vector<double>();  // row-major [H, W, C], any strides
  std::vector<unsigned char> bytes(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    bytes[i] = static_cast<unsigned char>(std::lround(std::clamp(values[i], 0.0, 1.0) * 255.0));  // NaN -> 0
  // Encoded in memory, then written atomically: a failed write never leaves a half PNG behind.
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  int ok = stbi_write_png_to_func(append, &png, width, height, channels, bytes.data(), width * channels);
  HEADROOM_CHECK(ok != 0, "[save_png] stbi_write_png_to_func failed to encode ", path);
  write_file_atomically(path, png, "save_png");
}

namespace {

// For output index `dst` of `out_size`, the two source indices and the weight
// of the second, with half-pixel centres and clamping at the edges.
struct Tap {
  int64_t i0, i1;
  double w1;
};
Tap source_tap(int64_t dst, int64_t in_size, int64_t out_size) {
  double src = (dst + 0.5) * double(in_size) / double(out_size) - 0.5;
  src = std::max(src, 0.0);
  int64_t i0 = std::min(static_cast<int64_t>(src), in_size - 1);
  int64_t i1 = std::min(i0 + 1, in_size - 1);
  return {i0, i1, src - double(i0)};
}

// in: [H, W, C] contiguous -> out: [height, width, C]
template <typename T>
void resize_bilinear(const T* in, int64_t H, int64_t W, int64_t C, T* out, int64_t height, int64_t width) {
  for (int64_t y = 0; y < height; ++y) {
    Tap ty = source_tap(y, H, height);
    for (int64_t x = 0; x < width; ++x) {
      Tap tx = source_tap(x, W, width);
      for (int64_t c = 0; c < C; ++c) {
        auto at = [&](int64_t i, int64_t j) { return double(in[(i * W + j) * C + c]); };
        double top = at(ty.i0, tx.i0) * (1 - tx.w1) + at(ty.i0, tx.i1) * tx.w1;
        double bottom = at(ty.i1, tx.i0) * (1 - tx.w1) + at(ty.i1, tx.i1) * tx.w1;
        out[(y * width + x) * C + c] = static_cast<T>(top * (1 - ty.w1) + bottom * ty.w1);
      }
    }
  }
}

}  // namespace

Tensor resize_image(const Tensor& image, int64_t height, int64_t width) {
  check_cpu("resize_image", {image});
  check_floating("resize_image", image, "image");
  HEADROOM_CHECK(image.dim() == 2 || image.dim() == 3, "[resize_image] expected [H, W] or [H, W, C], got shape ",
                 shape_str(image.shape()));
  HEADROOM_CHECK(height > 0 && width > 0 && image.size(0) > 0 && image.size(1) > 0,
                 "[resize_image] cannot resize shape ", shape_str(image.shape()), " to ", height, "x", width);
  Tensor in = image.contiguous();
  const int64_t C = image.dim() == 3 ? image.size(2) : 1;
  Shape out_shape = image.shape();
  out_shape[0] = height;
  out_shape[1] = width;
  Tensor out = Tensor::empty(out_shape, image.dtype());
  if (image.dtype() == DType::f32)
    resize_bilinear(in.data<float>(), image.size(0), image.size(1), C, out.data<float>(), height, width);
  else resize_bilinear(in.data<double>(), image.size(0), image.size(1), C, out.data<double>(), height, width);
  return out;
}

}  // namespace headroom
