#pragma once
// Images as tensors: f32 [H, W, C] with values in [0, 1], the layout stb
// reads and writes.  core/image.cpp is the only file that compiles stb, with
// static linkage, so headroom's copy cannot clash with a user's.
//
//   Tensor img = load_image("cat.png", 3);  // [H, W, 3]
//   save_png("small.png", resize_image(img, 32, 32));
#include <cstdint>
#include <string>

#include "headroom/core/tensor.h"

namespace headroom {

// The limits load_image enforces (docs/limits.md).
constexpr int64_t kMaxImageFileBytes = int64_t(256) << 20;  // 256 MiB
constexpr int kMaxImageSide = 16384;                        // pixels, width or height
constexpr int64_t kMaxImagePixels = int64_t(1) << 24;       // 16 Mpx (e.g. 4096 x 4096)

// A PNG, JPEG or BMP file, recognised by its first bytes (not its name), as
// stb_image decodes it.  channels = 0 keeps the file's channel count; 1..4
// converts (grey, grey+alpha, RGB, RGBA).  Returns f32 [H, W, C] in [0, 1].
// Throws naming the path and the reason for a file that is not a regular
// file or is over the limits above, another format, a corrupt JPEG Huffman
// table (checked before stb sees it), or what stb refuses.
Tensor load_image(const std::string& path, int channels = 0);

// Writes an 8-bit PNG from f32 or f64 [H, W, C] (C = 1..4) or [H, W] (grey);
// values are clamped to [0, 1] and rounded to the nearest of 256 levels.
// The file is written atomically: readers never see a half-written PNG.
void save_png(const std::string& path, const Tensor& image);

// Bilinear resize of [H, W, C] or [H, W] (f32 or f64) to height x width, with
// half-pixel centres and edge clamping (PyTorch's interpolate with
// mode="bilinear", align_corners=False, no antialiasing).
Tensor resize_image(const Tensor& image, int64_t height, int64_t width);

}  // namespace headroom
