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

// Any format stb_image reads (PNG, JPEG, BMP, ...).  channels = 0 keeps the
// file's channel count; 1..4 converts (grey, grey+alpha, RGB, RGBA).
// Returns f32 [H, W, C] in [0, 1]; throws naming the path and stb's reason.
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
